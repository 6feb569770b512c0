"""`hearth chat --tools NAME`: the model may call the tools of the user's MCP servers, each call after the user
allows it (app/tools/tool_chat.py). The approval prompt reads from the terminal; `--allow-tools` is for scripts
and is never a default."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from app.commands.options import SECONDS, at_least
from app.core.errors import BadArgument, HearthError
from app.tools.limits import CALL_TIMEOUT_S, MAX_ROUNDS

PREVIEW_CHARS = 400


def add_tools_args(p) -> None:
    p.add_argument("--tools", action="append", default=[], metavar="SERVER[,SERVER]",
                   help="let the model call the tools of these MCP servers (`hearth tools list`); each call is shown "
                   "and runs only after you allow it")
    p.add_argument("--allow-tools", action="store_true",
                   help="run every tool call without asking (for scripts; the tools run as you)")
    p.add_argument("--tool-choice", default="auto", metavar="auto|required|TOOL",
                   help="auto: the model decides; required: it must call a tool first; TOOL: it must call that one")
    p.add_argument("--tool-arg", action="append", default=[], metavar="TOOL.ARG=VALUE",
                   help="fix an argument of a tool (VALUE as JSON, or as text); the model cannot change it")
    p.add_argument("--tool-timeout", type=float, default=CALL_TIMEOUT_S, metavar="S",
                   help=f"seconds a tool call may take before it is stopped with an error result (default "
                   f"{CALL_TIMEOUT_S:g})",
                   **SECONDS)
    p.add_argument("--max-tool-rounds", type=int, default=MAX_ROUNDS, metavar="N",
                   help=f"rounds of tool calls in one answer before the model must answer in words (default "
                   f"{MAX_ROUNDS})",
                   **at_least(1, "rounds"))


def _pins(items: list[str]) -> dict[str, dict]:
    pins: dict[str, dict] = {}
    for item in items:
        target, found, raw = item.partition("=")
        tool, dot, arg = target.partition(".")
        if not found or not dot or not tool or not arg:
            raise HearthError(f"--tool-arg '{item}' must look like TOOL.ARG=VALUE (e.g. get_current_time.timezone=UTC).")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        pins.setdefault(tool, {})[arg] = value
    return pins


class ChatTools:
    """The servers of one `hearth chat`, and how their calls are shown and approved in the terminal."""

    def __init__(self, args: argparse.Namespace, info: dict, model_path: str | None):
        from app.tools.tool_chat import open_tool_set

        names = [n.strip() for item in args.tools for n in item.split(",") if n.strip()]
        self.args = args
        self.tools = open_tool_set(names, _pins(args.tool_arg))
        if args.tool_choice in ("auto", "required", "none"):
            self.choice, self.forced = args.tool_choice, None
        elif args.tool_choice in self.tools.by_name:
            self.choice, self.forced = "required", args.tool_choice
        else:
            self.tools.close()
            raise HearthError(f"--tool-choice {args.tool_choice}: the servers ({', '.join(names)}) have no such tool; "
                              f"theirs: {', '.join(self.tools.by_name) or 'none'}.")
        self.n_ctx = int(info.get("n_ctx") or 2048)
        from app.backends.vocab import TokenCounter

        self.counter = TokenCounter(model_path)
        self.quiet = bool(getattr(args, "json", False))
        if not self.quiet:
            listed = ", ".join(f"{c.entry.name} ({len(c.tools)} tools)" for c in self.tools.connections)
            print(f"hearth: tools from {listed}; "
                  f"{'every call runs without asking (--allow-tools)' if args.allow_tools else 'each call asks you first'}.",
                  file=sys.stderr)

    def close(self) -> None:
        self.tools.close()
        self.counter.close()

    def answer(self, client, messages: list[dict], sampling, echo: bool):
        """One answer with tools (a ToolTurn); Ctrl-C stops the generation, as in a chat without tools."""
        from app.tools.tool_chat import answer_with_tools

        previous = signal.getsignal(signal.SIGINT)
        in_main = threading.current_thread() is threading.main_thread()
        if in_main:
            signal.signal(signal.SIGINT, lambda *_: client.cancel())
        try:
            turn = answer_with_tools(
                client, messages, sampling, self.tools, self._approve, choice=self.choice, forced=self.forced,
                allow_all=self.args.allow_tools, max_rounds=self.args.max_tool_rounds,
                call_timeout=self.args.tool_timeout, n_ctx=self.n_ctx, count=self.counter.count,
                on_text=(lambda text: (sys.stdout.write(text), sys.stdout.flush())) if echo else None,
                on_call=self._show_call, on_result=self._show_result)
            if turn.notice:
                print(f"\nhearth: {turn.notice}", file=sys.stderr)
            return turn
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous)

    def _show_call(self, record) -> None:
        print(f"\n[tool call] {record.server}.{record.tool} {json.dumps(record.arguments, ensure_ascii=False)}",
              file=sys.stderr if self.quiet else sys.stdout, flush=True)

    def _show_result(self, record) -> None:
        out = sys.stderr if self.quiet else sys.stdout
        label = "tool error" if record.is_error else "tool result"
        preview = record.result if len(record.result) <= PREVIEW_CHARS else record.result[:PREVIEW_CHARS] + " ..."
        print(f"[{label}] {record.server}.{record.tool} ({record.seconds:.1f} s): {preview}", file=out)
        if record.cut:
            print(f"hearth: {record.cut}", file=sys.stderr)
        print(file=out, flush=True)

    @staticmethod
    def _approve(server: str, tool: str, arguments: dict) -> str:
        from app.tools.tool_chat import ALWAYS, DENY, ONCE

        while True:
            sys.stderr.write(f"Allow {server}.{tool}? It runs as you. [o]nce, [a]lways for this tool, [d]eny: ")
            sys.stderr.flush()
            line = sys.stdin.readline()
            if not line:  # no one to answer: never a yes
                sys.stderr.write("\n(no answer: denied)\n")
                return DENY
            if not sys.stdin.isatty():  # a piped answer is not echoed: end the prompt's line
                sys.stderr.write(line if line.endswith("\n") else line + "\n")
            answer = line.strip().lower()
            for word, decision in (("once", ONCE), ("always", ALWAYS), ("deny", DENY), ("yes", ONCE), ("no", DENY)):
                if answer and word.startswith(answer):
                    return decision


def check_tool_flags(args: argparse.Namespace) -> None:
    """The tool flags that need --tools, or a local model: said before the model loads."""
    if not args.tools and (args.allow_tools or args.tool_arg or args.tool_choice != "auto"):
        raise BadArgument("--allow-tools, --tool-arg and --tool-choice need --tools SERVER.")
    if args.tools and args.endpoint:
        raise BadArgument("--tools works with a local model for now, not with --endpoint.")


def open_tools(args: argparse.Namespace, info: dict, model_path: str | None) -> ChatTools | None:
    return ChatTools(args, info, model_path) if args.tools else None
