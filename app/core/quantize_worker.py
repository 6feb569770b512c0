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

# GGUF type name -> llama_cpp constant name (looked up in the child, where llama_cpp is imported anyway).
FTYPES = {
    "F16": "LLAMA_FTYPE_MOSTLY_F16",
    "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "Q6_K": "LLAMA_FTYPE_MOSTLY_Q6_K",
    "Q5_K_M": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
    "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quantize-worker")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("type", choices=sorted(FTYPES))
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)

    import llama_cpp

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, FTYPES[args.type])
    params.allow_requantize = True  # sources are usually already quantized GGUFs
    params.nthread = max(0, args.threads)
    rc = llama_cpp.llama_model_quantize(args.input.encode(), args.output.encode(), params)
    if rc != 0:
        print(f"llama.cpp's quantizer failed (code {rc}).", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
