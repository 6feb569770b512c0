"""A model in another quantization type for the benchmarks (`bench matrix`'s rows, `bench quality`'s quants):
the source itself, a file quantized earlier and still newer than its source, or a new one."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from app.core.errors import HearthError
from app.core.gguf.info import read_gguf_info
from app.core.making.quantize import default_output, quantize

Progress = Callable[[float, str], None]


def prepare_variant(source: Path, qtype: str, progress: Progress | None = None,
                    cancel: threading.Event | None = None, imatrix: str | Path | None = None) -> dict:
    """The source model in `qtype`: the source itself, a file quantized earlier, or a new one. With an importance
    matrix, a quant calibrated by it (kept under a name of its own, one per matrix file's contents)."""
    if imatrix is None and (read_gguf_info(source).file_type or "").upper() == qtype:
        return {"path": str(source), "cached": True, "quantized_from": None}
    target = default_output(source, qtype)
    newest = source.stat().st_mtime
    if imatrix is not None:
        import hashlib

        matrix = Path(imatrix)
        digest = hashlib.sha256(matrix.read_bytes()).hexdigest()[:10]
        target = target.with_name(f"{target.stem}-imatrix-{digest}.gguf")
        newest = max(newest, matrix.stat().st_mtime)
    if target.exists():
        try:
            if (read_gguf_info(target).file_type or "").upper() == qtype and target.stat().st_mtime >= newest:
                return {"path": str(target), "cached": True, "quantized_from": str(source)}
        except HearthError:
            pass  # unreadable leftover: quantize again over it

    def on_bytes(done: int, total: int) -> None:
        if progress:
            progress(done / max(total, 1), f"quantizing to {qtype}")

    result = quantize(source, qtype, out=target, progress=on_bytes, cancel=cancel,
                      allow_requantize=True, imatrix=imatrix)  # the bundled Q4_1 is the matrix's source
    return {"path": result.path, "cached": False, "quantized_from": str(source), "seconds": result.seconds}
