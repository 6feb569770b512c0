"""Hearth's command line: `hearth chat | doctor | bench | models | runtimes ...`.

Uses the same core and engine client as the GUI, without Qt. Errors a user
can act on print as one sentence; anything else is a bug and leaves a crash
log whose path is printed instead of a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

from app import __version__
from app.core import paths
from app.core.store.crashlog import write_crash_log
from app.core.errors import BadArgument, HearthError
from app.core.terminal_text import guard, one_line
from app.commands.grammar import Parser, add_examples

# Each module has register(subparsers); optional ones are added when present.
COMMAND_MODULES = ["app.commands.chat", "app.commands.serve", "app.commands.doctor", "app.commands.bench",
                   "app.commands.models", "app.commands.runtimes", "app.commands.gui", "app.commands.docs",
                   "app.commands.tools", "app.commands.completion"]


def command_modules(argv: list[str] | None) -> list[str]:
    """The command modules a command line needs: only the named command's (`hearth gui` must not import the
    benchmarks, and through them llama.cpp, before its window paints), none without a command (a double-click
    opens the window), and all for anything else (--help, a mistyped command that argparse lists the choices for)."""
    if argv is None:
        return COMMAND_MODULES
    if not argv:
        return []
    named = f"app.commands.{argv[0]}"
    # `hearth completion` writes out every command, so it needs them all.
    return [named] if named in COMMAND_MODULES and argv[0] != "completion" else COMMAND_MODULES


def build_parser(argv: list[str] | None = None) -> Parser:
    """The parser for argv (None: for every command)."""
    parser = Parser(
        prog="hearth",
        description="Run large language models on your own computer. Without a command, Hearth opens "
        "its window (or a terminal chat where no GUI can start).",
    )
    parser.add_argument("--version", action="version", version=f"hearth {__version__}")
    parser.add_argument("--selftest", action="store_true", help="check the engine, the model and the GUI, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules(argv):
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register(sub)
    add_examples(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Names, document text and answers come from anyone: what reaches the terminal has its control characters
    # escaped (app/core/terminal_text.py), whichever command printed it.
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = guard(sys.stdout), guard(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: list[str] | None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    from app.core.store import jsonstore

    # A damaged store (library.json, settings...) kept aside is said on stderr once, when it is found; for this
    # command only (a caller in the same process, a test, the self-test, would otherwise collect one per call).
    def say(text: str) -> None:
        print(f"hearth: {text}", file=sys.stderr)

    jsonstore.add_listener(say)
    try:
        args = parser.parse_args(argv)  # a number flag out of its range is a BadArgument already (options.within)
        if args.selftest:
            from app.selftest import run_selftest

            return run_selftest()
        if args.command is None:
            from app.commands.default import run_default

            return run_default()
        return int(args.func(args) or 0)
    except BadArgument as exc:  # a value argparse took but the command cannot use: argparse's own exit status
        print(f"hearth: {one_line(exc)}", file=sys.stderr)
        return 2
    except HearthError as exc:
        print(f"hearth: {one_line(exc)}", file=sys.stderr)  # a sentence, on its line, whatever names it holds
        return 1
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        from app.core.store import disk_errors
        if disk_errors.kind(exc) is not None:  # not a bug: the disk is full, read-only or closed to Hearth
            where = getattr(exc, "filename", None) or paths.data_dir()
            print(f"hearth: Hearth could not write {one_line(where)}: {disk_errors.describe(where, exc)}.",
                  file=sys.stderr)
            return 1
        # A bug: one sentence here, the traceback in the log.
        log = write_crash_log(exc)
        details = f"details are in {log}" if log else "no crash log could be written either"
        print(f"hearth: internal error ({type(exc).__name__}: {one_line(exc)}); {details}", file=sys.stderr)
        return 2
    finally:
        jsonstore.remove_listener(say)


if __name__ == "__main__":
    sys.exit(main())
