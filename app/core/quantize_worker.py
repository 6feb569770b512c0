"""Child process that runs llama.cpp's quantizer on one file.

`python -m app.core.quantize_worker INPUT OUTPUT TYPE [--threads N]` (or the
frozen app's --quantize-worker flag). It runs in a process of its own so that
the parent can cancel it by killing it: llama_model_quantize has no way to
stop once started. Exit code 0 on success; otherwise the reason is the last
line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from app.core.proc import emit, keep_stdout_for_events
from app.core.quant_types import QUANTIZE_TYPES, llama_ftype


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quantize-worker")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("type", choices=sorted(QUANTIZE_TYPES))
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    keep_stdout_for_events()  # llama.cpp's own output goes to stderr, the parent's log

    import llama_cpp

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, llama_ftype(args.type))
    params.allow_requantize = True  # sources are usually already quantized GGUFs
    params.nthread = max(0, args.threads)
    rc = llama_cpp.llama_model_quantize(args.input.encode(), args.output.encode(), params)
    if rc != 0:
        print(f"llama.cpp's quantizer failed (code {rc}).", file=sys.stderr, flush=True)
        return 1
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
