"""Child process that runs llama.cpp's quantizer on one file.

`python -m app.core.making.quantize_worker INPUT OUTPUT TYPE [--threads N] [--imatrix FILE]`
(or the frozen app's --quantize-worker flag). It runs in a process of its own so that
the parent can cancel it by killing it: llama_model_quantize has no way to
stop once started. Exit code 0 on success; otherwise the reason is the last
line on stderr.
"""

from __future__ import annotations

import argparse
import ctypes
import sys

from app.core.proc import emit, keep_stdout_for_events
from app.core.gguf.quant_types import QUANTIZE_TARGETS, llama_ftype


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quantize-worker")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("type", choices=sorted(QUANTIZE_TARGETS))
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--imatrix", help="an importance matrix file, checked against the input by the parent")
    args = parser.parse_args(argv)
    keep_stdout_for_events()  # llama.cpp's own output goes to stderr, the parent's log

    import llama_cpp

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, llama_ftype(args.type))
    params.allow_requantize = True  # sources are usually already quantized GGUFs
    params.nthread = max(0, args.threads)
    keep = _apply_imatrix(params, args.imatrix) if args.imatrix else None  # noqa: F841 - C reads it while quantizing
    rc = llama_cpp.llama_model_quantize(args.input.encode(), args.output.encode(), params)
    if rc != 0:
        print(f"llama.cpp's quantizer failed (code {rc}).", file=sys.stderr, flush=True)
        return 1
    emit("done")
    return 0


def _apply_imatrix(params, path: str):
    """Hand the matrix to llama.cpp as llama-quantize does (tools/quantize/quantize.cpp): per weight its
    in_sum2 / counts, a NULL-terminated llama_model_imatrix_data array, and the quantize.imatrix.* keys that make
    the quant remember its matrix. Returns what must stay alive until llama_model_quantize returns."""
    import llama_cpp

    from app.core.gguf import imatrix as imf
    matrix = imf.read_imatrix(path)
    names = sorted(matrix.entries)
    values = [matrix.entries[n].importance() for n in names]
    data = (llama_cpp.llama_model_imatrix_data * (len(names) + 1))()
    encoded = [n.encode() for n in names]
    for i, (name, v) in enumerate(zip(encoded, values)):
        data[i].name = name
        data[i].data = v.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        data[i].size = v.size
    data[len(names)].name = None  # the terminator
    params.imatrix = ctypes.cast(data, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    texts = ", ".join(matrix.datasets)
    kv = [(imf.QUANT_FILE_KEY, _fit_128(path)), (imf.QUANT_DATASET_KEY, _fit_128(texts)) if texts else None,
          (imf.QUANT_ENTRIES_KEY, len(names)), (imf.QUANT_CHUNKS_KEY, matrix.chunk_count) if matrix.chunk_count else None]
    kv = [pair for pair in kv if pair]
    overrides = (llama_cpp.llama_model_kv_override * (len(kv) + 1))()
    for o, (key, value) in zip(overrides, kv):
        o.key = key.encode()
        if isinstance(value, int):
            o.tag = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_INT
            o.value.val_i64 = value
        else:
            o.tag = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_STR
            o.value.val_str = value.encode()
    params.kv_overrides = ctypes.cast(overrides, ctypes.POINTER(llama_cpp.llama_model_kv_override))
    return data, values, encoded, overrides


def _fit_128(text: str) -> str:
    """llama.cpp's override strings hold 127 bytes: keep a long path's end, where its file name is."""
    raw = text.encode()
    if len(raw) <= 127:
        return text
    return "..." + raw[-124:].decode("utf-8", "ignore")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
