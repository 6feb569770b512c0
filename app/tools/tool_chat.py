"""One answer with tools: the model calls, the user allows, the server answers, the model answers again.

The model gets the enabled servers' tools through its chat template (or, for a template without tools, the
described-in-system text the API uses: app/protocol/tool_format.py), and its calls are forced well-formed by the
same grammar as the API's (app/protocol/tool_calls.py), so arguments always parse and fit the tool's schema.
No call runs before `approve` says so; "always" is remembered per server (app/tools/servers.py). Every
result, an error or a refusal included, goes back into the conversation, so the model always has something
to answer from, and a result longer than RESULT_SHARE of the context is cut with a note to the model.
"""

from __future__ import annotations

import copy
import secrets
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from app.protocol.messages import Done, SamplingOptions, Token
from app.protocol.tool_calls import CALL_OPEN, CallReader, ToolUse, tool_grammar
from app.tools.limits import CALL_TIMEOUT_S, CONNECT_TIMEOUT_S, MAX_ROUNDS
from app.tools.mcp_client import McpConnection, ToolInfo, ToolResult
from app.tools.servers import ALWAYS, DENY, ONCE, STOPPED, allow_always, allowed_tools  # noqa: F401 (theirs)

RESULT_SHARE = 0.25  # of the context: a result may take this much, so the question and the answer still fit

# approve(server, tool, arguments) -> ONCE | ALWAYS | DENY, or STOPPED when the answer was stopped meanwhile
Approver = Callable[[str, str, dict], str]


@dataclass
class CallRecord:
    server: str
    tool: str
    arguments: dict
    # once | always (asked now) | allowed (on the allow-list, or --allow-tools) | deny | stopped (never ran)
    decision: str
    result: str = ""  # what went back to the model
    is_error: bool = False
    cut: str = ""  # the note, when the result was cut
    seconds: float = 0.0
    id: str = ""  # the call's id in the conversation (its tool message answers it)
    round: int = 0  # calls of one round were written in one assistant message
    said: str = ""  # what the model wrote before the round's calls (on the round's first call)
    stopped: bool = False  # the answer was stopped while this call waited or ran

    def to_json(self) -> dict:
        return {"server": self.server, "tool": self.tool, "arguments": self.arguments, "decision": self.decision,
                "result": self.result, "is_error": self.is_error, "cut": self.cut or None,
                "seconds": round(self.seconds, 3), "id": self.id, "round": self.round,
                **({"said": self.said} if self.said else {}), **({"stopped": True} if self.stopped else {})}


class ToolSet:
    """The tools of the servers enabled for one chat, by the name the model calls them."""

    def __init__(self, connections: list[McpConnection], pinned: dict[str, dict[str, Any]] | None = None):
        self.connections = connections
        self.pinned = pinned or {}  # tool -> {argument: value}: fixed by the user; the model cannot change them
        self.by_name: dict[str, tuple[McpConnection, ToolInfo]] = {}
        for conn in connections:
            for tool in conn.tools:
                self.by_name.setdefault(tool.name, (conn, tool))  # a name two servers share: the first one's

    def functions(self) -> list[dict]:
        out = []
        for conn, tool in self.by_name.values():
            function = tool.function()
            pins = self.pinned.get(tool.name)
            if pins:
                params = copy.deepcopy(function["function"]["parameters"])
                props = params.setdefault("properties", {})
                for key, value in pins.items():
                    props[key] = {**({"description": props[key]["description"]}
                                     if isinstance(props.get(key), dict) and "description" in props[key] else {}),
                                  "const": value}
                    params["required"] = sorted(set(params.get("required", [])) | {key})
                function["function"]["parameters"] = params
            out.append(function)
        return out

    def close(self) -> None:
        for conn in self.connections:
            conn.close()


@dataclass
class ToolTurn:
    """What one answer with tools did: its calls in order, the messages it added, and the final Done."""

    calls: list[CallRecord] = field(default_factory=list)
    added: list[dict] = field(default_factory=list)
    done: dict = field(default_factory=dict)
    # Said to the user, not the model: e.g. a call the answer's token limit cut off (it comes back as text).
    notice: str = ""


# No usual token is longer than this many characters: a result this many times its token share is cut to that
# length before it is counted, so a 50 MB result costs a count of a few dozen KB, not of 50 MB.
MAX_CHARS_PER_TOKEN = 16


def cut_result(text: str, n_ctx: int, count: Callable[[str], int]) -> tuple[str, str]:
    """A tool result within RESULT_SHARE of the context (n_ctx tokens), and the note that says it was cut ("" when
    it fits): the one rule for `hearth chat`, the window and the API server, so that a result leaves room for the
    question and the answer wherever it was called."""
    limit = max(64, int(n_ctx * RESULT_SHARE))
    head = text[:limit * MAX_CHARS_PER_TOKEN]
    counted = count(head)
    whole = len(head) == len(text)
    if whole and counted <= limit:
        return text, ""
    size = f"{counted} tokens" if whole else f"{len(text):,} characters"
    keep = min(len(head), int(len(head) * limit / max(counted, 1)))
    while keep > 0 and count(head[:keep]) > limit:
        keep = int(keep * 0.9)
    note = (f"[Hearth cut this tool result: it was {size}, more than {RESULT_SHARE:.0%} of the model's "
            f"context; only its first {count(head[:keep])} tokens are shown.]")
    return head[:keep] + "\n" + note, note


def answer_with_tools(client, messages: list[dict], sampling: SamplingOptions, tools: ToolSet, approve: Approver,
                      choice: str = "auto", forced: str | None = None, allow_all: bool = False,
                      max_rounds: int = MAX_ROUNDS, call_timeout: float = CALL_TIMEOUT_S, n_ctx: int = 2048,
                      count: Callable[[str], int] | None = None, on_text: Callable[[str], None] | None = None,
                      on_call: Callable[[CallRecord], None] | None = None, on_result: Callable[[CallRecord], None]
                      | None = None, stop: threading.Event | None = None) -> ToolTurn:
    """Answer the conversation in `messages` (which it extends), calling tools as the model asks and the user
    allows. choice/forced: the first round's tool_choice (auto | required | none, or a forced function);
    later rounds are "auto", and after max_rounds of calls "none", so every answer ends in words.
    stop: set by the caller to stop the answer (the generation is cancelled by the caller, through the client):
    a call that waits or runs then ends as stopped, every call still gets its result message, and the turn ends
    after that round with finish_reason "cancelled" instead of asking the model again."""
    count = count or (lambda text: max(1, len(text) // 4))
    functions = tools.functions()
    turn = ToolTurn()
    rounds = 0
    while True:
        use = ToolUse(tools=functions, choice=choice if functions else "none", forced=forced, parallel=False,
                      names=[f["function"]["name"] for f in functions])
        grammar = tool_grammar(use) if use.active else ""
        reader = CallReader(use.names)
        done: dict = {}
        for event in client.chat(messages, replace(sampling, grammar=grammar), tools=functions or None):
            if isinstance(event, Token):
                shown, _ = reader.feed(event.text)
                if shown and on_text:
                    on_text(shown)
            elif isinstance(event, Done):
                done = event
        rest = reader.finish()
        if rest and on_text:
            on_text(rest)
        turn.done = done
        calls = reader.calls if use.active else []
        if not calls or done.get("finish_reason") == "cancelled":
            if use.active and CALL_OPEN in reader.text and done.get("finish_reason") == "length":
                turn.notice = (f"the model's tool call was cut off by --max-tokens ({sampling.max_tokens}) before "
                               "it was complete, so it was not run and is shown as text; ask again with a higher "
                               "--max-tokens (a call takes a few dozen tokens).")
            message = {"role": "assistant", "content": reader.content if use.active else done.get("text", "")}
            messages.append(message)
            turn.added.append(message)
            return turn
        ids = ["call_" + secrets.token_hex(8) for _ in calls]
        message = {"role": "assistant", "content": reader.content.strip(),
                   "tool_calls": [{"id": i, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                  for i, c in zip(ids, calls)]}
        messages.append(message)
        turn.added.append(message)
        for i, (call_id, call) in enumerate(zip(ids, calls)):
            record = _run_call(call.name, call.input, tools, approve, allow_all, call_timeout, on_call, stop,
                               call_id, rounds, message["content"] if i == 0 else "")
            record.result, record.cut = cut_result(record.result, n_ctx, count)
            turn.calls.append(record)
            if on_result:
                on_result(record)
            result = {"role": "tool", "tool_call_id": call_id, "name": call.name, "content": record.result}
            messages.append(result)
            turn.added.append(result)
        rounds += 1
        if stop is not None and stop.is_set():
            turn.done = {**done, "finish_reason": "cancelled"}
            return turn
        choice, forced = ("auto" if rounds < max_rounds else "none"), None


def _run_call(name: str, arguments: dict, tools: ToolSet, approve: Approver, allow_all: bool, timeout: float,
              on_call, stop: threading.Event | None = None, call_id: str = "", round_: int = 0,
              said: str = "") -> CallRecord:
    conn, tool = tools.by_name[name]  # the grammar allows only these names
    record = CallRecord(conn.entry.name, name, arguments, "allowed", id=call_id, round=round_, said=said)
    if on_call:
        on_call(record)
    if stop is not None and stop.is_set():
        record.decision = STOPPED
    elif not allow_all and name not in allowed_tools(conn.entry.name):
        try:
            record.decision = approve(conn.entry.name, name, arguments)
        except (EOFError, KeyboardInterrupt):  # no one to ask: never a yes
            record.decision = DENY
        if record.decision == ALWAYS:
            allow_always(conn.entry.name, name)
    if record.decision == DENY:
        record.result, record.is_error = "The user did not allow this call.", True
        return record
    if record.decision == STOPPED:
        record.result, record.is_error, record.stopped = "The user stopped the answer before this call ran.", True, True
        return record
    result: ToolResult = conn.call(name, arguments, timeout, stop)
    record.result, record.is_error, record.seconds = result.text, result.is_error, result.seconds
    record.stopped = bool(stop is not None and stop.is_set() and result.is_error)
    return record


def open_tool_set(names: list[str], pinned: dict | None = None, connect_timeout: float | None = None) -> ToolSet:
    """Connections to the named servers of mcp.json; a server that cannot start is one sentence (and the ones
    already started are closed again)."""
    from app.tools.servers import get_server

    opened: list[McpConnection] = []
    try:
        for name in names:
            opened.append(McpConnection(get_server(name), connect_timeout or CONNECT_TIMEOUT_S).open())
    except BaseException:
        for conn in opened:
            conn.close()
        raise
    tools = ToolSet(opened, pinned)
    unknown = [t for t in (pinned or {}) if t not in tools.by_name]
    if unknown:
        tools.close()
        from app.tools.servers import ToolsConfigError

        raise ToolsConfigError(f"--tool-arg names {', '.join(unknown)}, which none of the servers "
                               f"({', '.join(names)}) has; their tools: {', '.join(tools.by_name) or 'none'}.")
    return tools
