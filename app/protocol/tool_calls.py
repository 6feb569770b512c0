"""Tool calling for every client (the API server, the CLI's and the window's MCP tools): a request's `tools`
and `tool_choice`, the grammar that keeps calls well-formed, and reading the calls back out of an answer.
Bad tools or choices raise BadSchema naming the field; the API server turns it into a 400.

Calls are written in one format (app/protocol/tool_format.py): `<tool_call>\\n{"name": ..., "arguments":
{...}}\\n</tool_call>`. The grammar makes the JSON inside always parse, name one of the request's tools
and fit that tool's parameter schema:

- "required" and a named function: the answer is one call or more (one with parallel_tool_calls false);
- "auto": the answer is either calls, or text that does not start with "<" (a model starts a call with
  "<tool_call>"; from its first character on, the grammar holds it to a well-formed call). A call a
  model writes after some text is read too, but was not constrained. A call opening the answer as a JSON object,
  bare or in a ```json fence, is held to the tools the same way (see below);
- "none": no tools reach the prompt and no grammar applies.

A model that learned tools in another dress writes its call as a JSON object, bare or in a ```json fence, where
this format wants the tags (Qwen 2.5's small models do so nearly always: asked to make a file, Qwen2.5-Coder 0.5B
wrote ```json {"name": "exec_command", "arguments": {"cmd": ...}} ``` and no call came back). llama.cpp's server
and Ollama read such an object as a call, and so does CallReader, where it opens the answer and names one of the
request's tools. Under "auto" the grammar holds such an opening to a call of one of the tools (an answer of text
starts with anything else: prose, a ```python block, a JSON array); written after some text it is text.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from app.protocol.schema_grammar import BadSchema, check_ambiguity, schema_copy, schema_rules
from app.protocol.tool_format import CALL_CLOSE, CALL_OPEN

MAX_TOOLS = 128
MAX_PARALLEL_CALLS = 4
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
ANY_CHAR = r"[\U00000000-\U0010FFFF]"


@dataclass
class ToolUse:
    tools: list[dict]  # OpenAI's function tools, as the chat template gets them
    choice: str = "auto"  # auto | required | none
    forced: str | None = None  # the function a named tool_choice asks for
    parallel: bool = True
    names: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return bool(self.tools) and self.choice != "none"


def tool_use(body: dict) -> ToolUse | None:
    """The request's tools and choice, checked; None when it has no tools."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise BadSchema("'tool_choice' needs 'tools' to choose from.", "tool_choice")
        return None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise BadSchema(f"'tools' must be a list of at most {MAX_TOOLS} function tools.", "tools")
    checked, names = [], []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise BadSchema(f"{where} must be {{\"type\": \"function\", \"function\": {{...}}}}.", where)
        name = function.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise BadSchema(f"{where}.function.name must be 1-64 letters, digits, '_', '.' or '-'.",
                          f"{where}.function.name")
        if name in names:
            raise BadSchema(f"{where}: there are two tools named '{name}'.", f"{where}.function.name")
        if not isinstance(function.get("description", ""), str):
            raise BadSchema(f"{where}.function.description must be a string.", f"{where}.function.description")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise BadSchema(f"{where}.function.parameters must be a JSON schema object.", f"{where}.function.parameters")
        names.append(name)
        checked.append({"type": "function", "function": {**function, "parameters": parameters}})
    use = ToolUse(tools=checked, names=names)
    if isinstance(choice, dict):
        function = choice.get("function")
        forced = function.get("name") if isinstance(function, dict) else None
        if choice.get("type") != "function" or forced not in names:
            raise BadSchema(f"'tool_choice' must name one of the tools ({', '.join(names)}).", "tool_choice")
        use.choice, use.forced = "required", forced
    elif choice in ("auto", "required", "none"):
        use.choice = choice
    elif choice is not None:
        raise BadSchema("'tool_choice' must be 'auto', 'required', 'none' or {\"type\": \"function\", "
                      "\"function\": {\"name\": ...}}.", "tool_choice")
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise BadSchema("'parallel_tool_calls' must be true or false.", "parallel_tool_calls")
    use.parallel = parallel
    return use


def tool_grammar(use: ToolUse) -> str:
    """The grammar of an answer under this tool choice (see the module's docstring)."""
    # A copy: the converter rewrites $refs in place, and the tools also go to the chat template as they came.
    allowed = schema_copy([t["function"] for t in use.tools if use.forced in (None, t["function"]["name"])], "tools")
    call_schema = {"oneOf": [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                              "properties": {"name": {"const": f["name"]}, "arguments": f["parameters"]}}
                             for f in allowed]}
    converter = schema_rules(call_schema, "call-json", "tools", prop_order=["name", "arguments"],
                             parts=[(f"tool-{i}", f["parameters"]) for i, f in enumerate(allowed)])
    call = f'{_literal(CALL_OPEN)} "\\n" call-json "\\n" {_literal(CALL_CLOSE)}'
    more = f' ("\\n" call){{0,{MAX_PARALLEL_CALLS - 1}}}' if use.parallel else ""
    converter._add_rule("call", call)
    converter._add_rule("calls", f"call{more}")
    if use.choice == "auto":
        # A call in a model's habitual dress (a JSON object, bare or in a ```json fence) is held to the tools from
        # its first character too; text is anything that starts otherwise (a ```python block, prose, ...).
        converter._add_rule("fenced", '"```" "json"? "\\n" call-json "\\n"? "```"')
        rest = f"{ANY_CHAR}*"
        converter._add_rule("fence-text", f'[^j\\n] {rest} | "\\n" ([^{{] {rest})? | "j" ([^s] {rest} | "s" ([^o] {rest} | '
                                          f'"o" ([^n] {rest} | "n" ([^\\n] {rest} | "\\n" ([^{{] {rest})?)?)?)?)?')
        converter._add_rule("text", f'[^<{{`] {rest} | "`" ([^`] {rest})? | "``" ([^`] {rest})? | "```" fence-text?')
        converter._add_rule("root", "calls | call-json | fenced | text")
    else:
        converter._add_rule("root", "calls")
    grammar = converter.format_grammar()
    check_ambiguity(grammar, "tools")  # the tools' schemas side by side, which no one pattern shows
    return grammar


def _literal(text: str) -> str:
    return json.dumps(text)  # a GBNF literal: the same quoting and escapes as a JSON string


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    input: dict  # the arguments as an object, as Anthropic sends them

    def openai(self, index: int | None = None) -> dict:
        call = {"id": "call_" + secrets.token_hex(12), "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}
        return call if index is None else {"index": index, **call}


class CallReader:
    """Splits an answer, as it streams, into text for the user and the tool calls it makes.

    The text before the first call is the answer's content; text that might be the start of a call is held
    back until it is clearly not one. No markup reaches the user, and an answer is never left empty: a call
    cut off (by max_tokens, a stop sequence) before any call was complete, and one that does not parse, come
    back as text without their <tool_call> tags.

    names: the request's tools, whose calls written as a leading JSON object are read too (the module's
    docstring); without them only the tagged format is."""

    def __init__(self, names: list[str] | tuple[str, ...] = ()):
        self.text = ""
        self.shown = 0  # characters of content handed out
        self.calls: list[ToolCall] = []
        self._scanned = 0  # where the next call is looked for
        self._loose: list[str] = []  # calls that did not parse, as content
        self.names = tuple(names)
        self._names = set(names)
        self._opening = bool(names)  # the answer's start may still be a call written as JSON
        self._fence_open = False  # such a call was read from a ```json fence whose close is still to come
        self._named = False  # the opening is an object that names one of the tools: only its end is awaited

    def feed(self, piece: str) -> tuple[str, list[ToolCall]]:
        """Content to show now, and the calls this piece completed."""
        self.text += piece
        before = len(self.calls)
        held = self._json_opening(piece)
        opened = self.calls[before:]  # a call the answer opened with, read just now
        if held:
            return "", opened
        content, tagged = self._tagged()
        return content, opened + tagged

    def _json_opening(self, piece: str) -> bool:
        """Whether the text must be held back: the answer may still open with a call written as JSON. When
        that call is complete it joins self.calls and leaves self.text; when the text is clearly something
        else, the reader goes on as for any answer. piece: what just came; the object is parsed again only when
        it brings a "}" (an object can end nowhere else), so that a call's long arguments (a file an agent
        writes) are not looked at again with every token."""
        if self._fence_open:  # the close of the fence a call came in, swallowed when it comes
            rest = self.text.lstrip()
            if rest and not rest.startswith("```") and not "```".startswith(rest):
                self._fence_open = False
            elif rest.startswith("```"):
                self.text, self._fence_open = rest[3:].lstrip("\n"), False
            else:
                return True
        if not self._opening:
            return False
        if self._named and "}" not in piece:
            return True  # nothing to look at again before a "}" comes
        text = self.text.lstrip()
        fence = FENCE.match(text)
        if fence is None and any(f.startswith(text) for f in ("```json\n", "```JSON\n", "```\n")):
            return True  # the start of a fence
        body = text[fence.end():].lstrip() if fence else text
        if not body:
            return True
        if not self._may_call(body):
            self._opening = False
            return False
        if "}" not in piece:
            return True
        try:
            data, end = json.JSONDecoder().raw_decode(body)
        except ValueError:
            return True  # an object still being written (or one that never parses: said at the end, as text)
        call = _parse_call(json.dumps(data)) if isinstance(data, dict) and data.get("name") in self._names else None
        self._opening = False
        if call is None:
            return False
        self.calls.append(call)
        self.text, self._fence_open = body[end:], fence is not None
        return self._json_opening("")

    def _may_call(self, body: str) -> bool:
        """Whether an answer's opening can still be {"name": "<one of the tools>", ...}, as llama.cpp's reader
        asks (so that an answer of other JSON, or prose in braces, is held back no longer than its first words)."""
        if body[0] != "{" or len(body) > MAX_JSON_OPENING:
            return False
        head = body[1:].lstrip()
        if not head.startswith('"name"'):
            return '"name"'.startswith(head)  # the key still being written
        rest = head[len('"name"'):].lstrip()
        if rest[:1] == ":":
            rest = rest[1:].lstrip()
        elif rest:
            return False
        if not rest:
            return True
        name = re.match(r'"([^"\\]*)("?)', rest)
        if name is None:
            return False
        written, closed = name.groups()
        if closed:
            self._named = written in self._names
            return self._named
        return any(n.startswith(written) for n in self._names)

    def _tagged(self) -> tuple[str, list[ToolCall]]:
        start = self.text.find(CALL_OPEN)
        end = start if start >= 0 else len(self.text) - _held_back(self.text, CALL_OPEN)
        content = self.text[self.shown:end] if end > self.shown else ""
        self.shown = max(self.shown, end)
        new = []
        while start >= 0:
            at = self.text.find(CALL_OPEN, max(self._scanned, start))
            close = self.text.find(CALL_CLOSE, at) if at >= 0 else -1
            if close < 0:
                break
            inner = self.text[at + len(CALL_OPEN):close]
            call = _parse_call(inner)
            if call is not None:
                new.append(call)
            elif inner.strip():
                self._loose.append(inner.strip())
                content += inner.strip()
            self._scanned = close + len(CALL_CLOSE)
        self.calls += new
        return content, new

    def finish(self) -> str:
        """Content held back to the end: text that only looked like the start of a call, or the unfinished
        call the answer ended in, as text."""
        if self._fence_open and "```".startswith(self.text.strip()):
            self.text = ""  # the fence a call came in, closed or cut short: markup, not content
        self._opening = self._fence_open = False  # what is still held is text, as it stands
        if CALL_OPEN in self.text:
            return self._unfinished()
        rest, self.shown = self.text[self.shown:], len(self.text)
        return rest

    def _unfinished(self) -> str:
        """What the model wrote of a call it did not finish, without the markup; "" after calls it did finish
        (the answer has them, and a repeat cut short after them is no answer)."""
        at = self.text.find(CALL_OPEN, self._scanned)
        if at < 0 or self.calls:
            return ""
        inner = self.text[at + len(CALL_OPEN):]
        return inner[:len(inner) - _held_back(inner, CALL_CLOSE)].strip()

    @property
    def after_calls(self) -> str:
        """What the answer wrote after its last complete call (all of it where it completed none): the part of an
        answer that a token limit can have cut."""
        return self.text[self._scanned:] if self.calls else self.text

    @property
    def content(self) -> str:
        """The whole answer's content, once it is complete (see the class's docstring)."""
        start = self.text.find(CALL_OPEN)
        if start < 0:
            return self.text
        return self.text[:start] + "".join(self._loose) + self._unfinished()


def answer_piece(reader: CallReader | None, text: str) -> tuple[str, list[ToolCall]]:
    """A piece of a streamed answer as (content to show, calls it completed); "" marks the answer's end.
    Without tools (reader None) a piece is all content."""
    if reader is None:
        return text, []
    return reader.feed(text) if text else (reader.finish(), [])


FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n")
MAX_JSON_OPENING = 1 << 20  # held back at most this much while it may still be a call written as JSON


def _held_back(text: str, marker: str) -> int:
    """How many characters at the end of text could begin marker."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def _parse_call(inner: str) -> ToolCall | None:
    try:
        data = json.loads(inner)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments: Any = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as JSON text already
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(data["name"], json.dumps(arguments, ensure_ascii=False), arguments)
