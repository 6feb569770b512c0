"""Requantize a GGUF model with llama.cpp's own quantizer, in a child process.

The child (app/core/making/quantize_worker.py) writes to `<output>.part`; the parent
polls it for progress, kills the child on cancel, and renames the file when
the child succeeds. The result is recorded in the library (source
"quantized", owned by Hearth) so it lists and loads like any other model.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from app.core import library, paths
from app.core.errors import HearthError, ModelFileError
from app.core.gguf.info import read_gguf_info
from app.core.gguf.names import strip_quant
from app.core.gguf.quant_types import QUANTIZE_TARGETS, bits_per_weight, needs_imatrix_reason, seed_name
from app.core.units import human_size
from app.core.gguf.quant_types import label as type_label  # noqa: F401 - its old home; tests and callers use it
from app.core.proc import JsonChild

QUANT_TYPES = QUANTIZE_TARGETS  # the targets, in menu order (app/core/gguf/quant_types.py)


class RequantizeRefused(HearthError):
    """The source is already quantized and the caller did not allow requantizing."""


class QuantizeCancelled(HearthError):
    """The user cancelled a quantization; nothing was kept."""


@dataclass
class QuantizeResult:
    path: str
    type: str
    seed_name: str | None
    size_bytes: int
    source: str
    seconds: float
    imatrix: str | None = None  # the importance matrix it was calibrated with

    def to_dict(self) -> dict:
        return asdict(self)


UNQUANTIZED = frozenset({"F32", "F16", "BF16"})


CLI_WAY_ON = ", or pass --allow-requantize to go on"


def requantize_problem(source_name: str, source_type: str | None, qtype: str, source_bytes: int,
                       n_params: int, way_on: str = CLI_WAY_ON) -> str | None:
    """The sentence that says why quantizing an already quantized file is a loss; None for an F16/BF16/F32 one.
    way_on: how this client goes on all the same (the command line's flag; the window's button)."""
    if not source_type or source_type.upper() in UNQUANTIZED:
        return None
    bigger = ""
    out_bits, in_bits = bits_per_weight(qtype), bits_per_weight(source_type)
    if out_bits and in_bits and out_bits > in_bits:
        bigger = (f", and a {qtype} file (about {human_size(int(n_params * out_bits / 8))} against "
                  f"{human_size(source_bytes)}) has more bits but no more of the original model in them")
    return (f"{source_name} is already quantized ({source_type}): quantizing it again to {qtype} keeps the first "
            f"quantization's loss and adds its own{bigger}. Quantize the original (F16, BF16 or the checkpoint) "
            f"instead{way_on}.")


def default_output(source: Path, qtype: str) -> Path:
    return paths.models_dir() / f"{strip_quant(source.stem)}-{qtype}.gguf"


def quantize(model: str | Path, qtype: str, out: str | Path | None = None,
             progress: Callable[[int, int], None] | None = None, cancel: threading.Event | None = None,
             threads: int | None = None, allow_requantize: bool = False,
             imatrix: str | Path | None = None) -> QuantizeResult:
    """Quantize `model` (a path or a library name) to `qtype`; returns the new file, already in the library.
    A source that is already quantized is refused with the reason unless allow_requantize (llama.cpp's own
    --allow-requantize): the benchmark's matrix and the self-test start from the bundled Q4_1 on purpose.

    imatrix: an importance matrix file (app/core/gguf/imatrix.py) that calibrates the quantization; the types
    llama.cpp makes only with one (NEEDS_IMATRIX) are refused without it, and a matrix of another model is refused.

    progress(done_bytes, total_bytes) follows the output file's growth against its expected size.
    """
    qtype = qtype.upper()
    if qtype not in QUANT_TYPES:
        raise HearthError(f"Unknown quantization type '{qtype}'; use one of {', '.join(QUANT_TYPES)}.")
    if imatrix is None and needs_imatrix_reason(qtype):
        raise HearthError(needs_imatrix_reason(qtype))
    source = Path(library.resolve(model).path).resolve()
    info = read_gguf_info(source)
    if info.split_count > 1:
        raise ModelFileError(f"{source.name} is a split GGUF set; quantizing split sets is not supported yet.")
    problem = requantize_problem(source.name, info.file_type, qtype, info.file_size, info.parameters)
    if problem and not allow_requantize:
        raise RequantizeRefused(problem)
    matrix_args: tuple[str, ...] = ()
    if imatrix is not None:
        from app.core.gguf.imatrix import ImatrixError, mismatch, read_imatrix

        matrix = read_imatrix(imatrix)
        wrong = mismatch(matrix, source.name, info.tensors)
        if wrong:
            raise ImatrixError(wrong)
        imatrix = str(Path(matrix.path).resolve())
        matrix_args = ("--imatrix", imatrix)
    target = Path(out).expanduser().resolve() if out else default_output(source, qtype)
    if target == source:
        raise HearthError("The output file would overwrite the model being quantized; choose another --out.")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    expected = int(info.parameters * bits_per_weight(qtype) / 8) or 1
    log = paths.log_dir() / f"quantize-{target.stem}.log"
    started = time.perf_counter()
    args = (str(source), str(part), qtype, "--threads", str(threads or 0), *matrix_args)

    def tick() -> None:
        if cancel is not None and cancel.is_set():
            raise QuantizeCancelled("Quantization cancelled; no file was kept.")
        if progress is not None and part.exists():
            progress(min(part.stat().st_size, expected - 1), expected)

    with open(log, "wb") as err:
        try:
            with JsonChild("app.core.making.quantize_worker", *args, log=err) as child:
                code = child.run(lambda _event: None, on_tick=tick)
        except BaseException:  # cancelled or interrupted: leaving the `with` killed the child
            part.unlink(missing_ok=True)
            raise
    if code != 0 or not part.exists():
        part.unlink(missing_ok=True)
        raise HearthError(f"Quantizing {source.name} to {qtype} failed: {_last_reason(log)} (log: {log}).")
    part.replace(target)
    size = target.stat().st_size
    if progress is not None:
        progress(size, size)
    library.register(target, "quantized", owned=True)
    return QuantizeResult(path=str(target), type=qtype, seed_name=seed_name(qtype), size_bytes=size,
                          source=str(source), seconds=time.perf_counter() - started,
                          imatrix=str(imatrix) if imatrix is not None else None)


def _last_reason(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no reason given"
    errors = [ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    return (errors or lines or ["no reason given"])[-1][:300]
