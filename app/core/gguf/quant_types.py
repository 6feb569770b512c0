"""The GGUF quantization types Hearth knows: one table for names, llama.cpp's file types, sizes and labels.

The quantizer, the converter, the fit check, the command line, the Models page and the benchmark all read
this table, so a type is added (or its size estimate corrected) in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuantType:
    name: str  # GGUF's name: Q4_K_M
    seed: str | None  # what people call it: INT4
    # Approximate bits per weight of a whole file in this type (block scales included, small tensors kept in
    # F32 ignored): size estimates for progress, disk room and the fit hints. None: not estimated.
    bits: float | None = None
    # llama.cpp's file type without its prefix: LLAMA_FTYPE_<ftype> in llama.h, LlamaFileType.<ftype> in gguf-py.
    ftype: str | None = None
    quantize: bool = False  # a target of `hearth models quantize` (and the Models page, the benchmark)
    convert: bool = False  # a quantization offered right after converting a checkpoint
    outtype: bool = False  # an output type of llama.cpp's converter itself (lower-case there: f16)
    # A target of `hearth models quantize` made for an importance matrix (IQ types): offered with one.
    calibrated: bool = False
    # llama.cpp refuses it without a matrix (llama-quant.cpp, tensor_requires_imatrix): its weights at 1-3 bits
    # keep the model only where the matrix says which columns matter.
    needs_imatrix: bool = False


# In the order menus and help texts list them.
TYPES = (
    QuantType("F16", "FP16", 16.0, "MOSTLY_F16", quantize=True, outtype=True),
    QuantType("BF16", "BF16", 16.0, "MOSTLY_BF16", outtype=True),
    QuantType("Q8_0", "INT8", 8.5, "MOSTLY_Q8_0", quantize=True, convert=True, outtype=True),
    QuantType("Q6_K", "6-bit", 6.56, "MOSTLY_Q6_K", quantize=True, convert=True),
    QuantType("Q5_K_M", "5-bit", 5.7, "MOSTLY_Q5_K_M", quantize=True, convert=True),
    QuantType("Q5_K_S", "5-bit"),
    QuantType("Q5_0", "5-bit", 5.5, "MOSTLY_Q5_0", convert=True),
    QuantType("Q5_1", "5-bit"),
    QuantType("Q4_K_M", "INT4", 4.85, "MOSTLY_Q4_K_M", quantize=True, convert=True),
    QuantType("Q4_K_S", "INT4"),
    QuantType("Q4_1", "INT4", 5.0, "MOSTLY_Q4_1", convert=True),
    QuantType("Q4_0", "INT4", 4.55, "MOSTLY_Q4_0", quantize=True, convert=True),
    QuantType("IQ4_XS", "INT4", 4.25, "MOSTLY_IQ4_XS", calibrated=True),
    QuantType("IQ4_NL", "INT4", 4.5, "MOSTLY_IQ4_NL", calibrated=True),
    QuantType("Q3_K_M", "3-bit"),
    QuantType("Q3_K_S", "3-bit"),
    QuantType("Q3_K_L", "3-bit"),
    QuantType("IQ3_S", "3-bit", 3.44, "MOSTLY_IQ3_S", calibrated=True),
    QuantType("IQ3_XXS", "3-bit", 3.06, "MOSTLY_IQ3_XXS", calibrated=True, needs_imatrix=True),
    QuantType("Q2_K", "2-bit"),
    QuantType("Q2_K_S", "2-bit", 2.7, "MOSTLY_Q2_K_S", calibrated=True, needs_imatrix=True),
    QuantType("IQ2_S", "2-bit", 2.5, "MOSTLY_IQ2_S", calibrated=True, needs_imatrix=True),
    QuantType("IQ2_XS", "2-bit", 2.31, "MOSTLY_IQ2_XS", calibrated=True, needs_imatrix=True),
    QuantType("IQ2_XXS", "2-bit", 2.06, "MOSTLY_IQ2_XXS", calibrated=True, needs_imatrix=True),
    QuantType("IQ1_M", "1-bit", 1.75, "MOSTLY_IQ1_M", calibrated=True, needs_imatrix=True),
    QuantType("IQ1_S", "1-bit", 1.56, "MOSTLY_IQ1_S", calibrated=True, needs_imatrix=True),
    QuantType("F32", "FP32", 32.0, "ALL_F32", outtype=True),
)
BY_NAME = {t.name: t for t in TYPES}

QUANTIZE_TYPES = tuple(t.name for t in TYPES if t.quantize)  # F16, Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0
CALIBRATED_TYPES = tuple(t.name for t in TYPES if t.calibrated)  # the IQ types and Q2_K_S: offered with a matrix
QUANTIZE_TARGETS = QUANTIZE_TYPES + CALIBRATED_TYPES  # everything `hearth models quantize` makes
NEEDS_IMATRIX = tuple(t.name for t in TYPES if t.needs_imatrix)
CONVERT_QUANTS = tuple(t.name for t in TYPES if t.convert)
CONVERT_OUTTYPES = tuple(t.name.lower() for t in TYPES if t.outtype)  # f16, bf16, q8_0, f32
CONVERT_OUTTYPE = "f16"  # what a conversion writes unless told otherwise: lossless for the usual F16 and BF16 weights
SEED_NAMES = {t.name: t.seed for t in TYPES if t.seed}


def seed_name(name: str | None) -> str | None:
    return SEED_NAMES.get((name or "").upper())


def label(name: str) -> str:
    """'Q4_K_M' -> 'Q4_K_M (INT4)'; a type without a common name stays as it is."""
    seed = SEED_NAMES.get(name)
    return f"{name} ({seed})" if seed else name


def bits_per_weight(name: str, default: float | None = None) -> float | None:
    known = BY_NAME.get(name.upper())
    return known.bits if known is not None and known.bits is not None else default


def needs_imatrix_reason(name: str) -> str | None:
    """The sentence that says why a type cannot be made without an importance matrix; None where it can."""
    known = BY_NAME.get(name.upper())
    if known is None or not known.needs_imatrix:
        return None
    return (f"{known.name} needs an importance matrix: at {known.bits:g} bits a weight only the columns the matrix "
            f"marks as important keep the model, so llama.cpp refuses to make it without one; compute one with "
            f"`hearth models imatrix NAME --text FILE` and pass it with --imatrix FILE.")


def llama_ftype(name: str) -> str:
    """The name of llama_cpp's constant for a quantizer target: 'Q4_K_M' -> 'LLAMA_FTYPE_MOSTLY_Q4_K_M'."""
    return "LLAMA_FTYPE_" + BY_NAME[name.upper()].ftype
