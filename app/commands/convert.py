"""`hearth models convert PATH_OR_REPO`: a Hugging Face checkpoint to a GGUF in the model library."""

from __future__ import annotations

import json
import sys
import time

from app.core.making import convert as core
def register(models_sub) -> None:
    """Adds `convert` to the `hearth models` sub-commands (app/commands/models.py calls this)."""
    p = models_sub.add_parser(
        "convert", help="convert a Hugging Face checkpoint (folder or repository) to GGUF",
        description="Convert a Hugging Face checkpoint (a folder with config.json, tokenizer and safetensors, or "
        "a repository such as owner/name, of which only those files are downloaded) to a GGUF with llama.cpp's "
        "converter. Needs the convert extra: pip install \"hearth[convert]\".")
    p.add_argument("source", metavar="PATH_OR_REPO")
    p.add_argument("--outtype", choices=core.OUTTYPES, default=core.CONVERT_OUTTYPE,
                   help=f"tensor type of the converted GGUF (default {core.CONVERT_OUTTYPE})")
    p.add_argument("--quantize", metavar="TYPE", type=str.upper, choices=core.QUANT_TYPES,
                   help="then quantize with llama.cpp, e.g. Q4_K_M (INT4) or Q8_0 (INT8)")
    p.add_argument("--out", metavar="PATH", help="where to write the GGUF (default: Hearth's models folder)")
    p.add_argument("--token", help="Hugging Face token for gated repositories (default: HF_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


class _Printer:
    """One status line on stderr, rewritten at most a few times a second."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        # A log file or pipe gets one line per stage instead of carriage-return updates.
        self.tty = sys.stderr.isatty()
        self._last = 0.0
        self._stage = ""

    def __call__(self, stage: str, done: float, total: float) -> None:
        now = time.monotonic()
        if not self.enabled or (stage == self._stage and (now - self._last < 0.25 or not self.tty)):
            return
        if not self.tty and self._stage:
            print(file=sys.stderr)
        self._last, self._stage = now, stage
        pct = f" {100 * done / total:5.1f}%" if total and self.tty else ""
        size = f" {total / 2**20:,.1f} MiB" if total and stage != "quantize" else ""
        print(f"\r{stage}:{pct}{size}", end="", file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.enabled and self._stage:
            print(file=sys.stderr)
            self._stage = ""


def run(args) -> int:
    printer = _Printer(enabled=sys.stderr.isatty() or not args.json)
    started = time.perf_counter()
    try:
        path = core.convert(args.source, outtype=args.outtype, quantize=args.quantize, out=args.out,
                            progress=printer, token=args.token)
    except core.ConvertFailed as exc:
        printer.finish()  # the log starts on a fresh line
        if exc.log_tail:
            print(f"--- last lines of {exc.log_path} ---\n{exc.log_tail}\n---", file=sys.stderr)
        raise
    finally:
        printer.finish()
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"path": str(path), "bytes": path.stat().st_size, "seconds": round(seconds, 2)}))
    else:
        print(f"{path} ({path.stat().st_size / 2**20:,.1f} MiB, {seconds:.1f} s)")
    return 0
