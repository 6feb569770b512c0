"""Anthropic's Messages API, POST /v1/messages, over the same backend as the OpenAI endpoints.

A request is checked and turned into the same Generation the OpenAI endpoints make (app/server/openai/chat_request.py),
tools included: Anthropic's tools, tool_use and tool_result blocks become OpenAI's functions, tool calls and
tool messages, and go through the same grammar and call reader (app/server/tools.py). The answer comes back
in Anthropic's shapes: a message with content blocks and a stop_reason, or the stream of named events
message_start, content_block_start, ping, content_block_delta..., content_block_stop, message_delta,
message_stop. Errors use Anthropic's envelope (app/server/edge/errors.py).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, replace
from typing import Annotated, Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.core.chats.reasoning import ReasoningSplitter
from app.protocol import messages as P
from app.protocol.option_spec import Range
from app.server.answers import (TextFrame, chain, event_stream, limit_cut, named_sse, respond, stream_parts,
                                token_counts, whole_parts)
from app.server.edge.errors import from_engine, invalid
from app.server.media_parts import anthropic_image, refuse_unless_takes
from app.server.edge.request_shape import read, said
from app.server.openai.chat_request import MAX_TOKENS_CAP, STOPS, Generation, stop_list
from app.server.options import given_with
from app.server.structured import schema_grammar
from app.server.tools import CallReader, ToolCall, tool_grammar, tool_use


class AnthropicMessages:
    def __init__(self, api):
        """api: the OpenAIApi whose models, model check and request start this endpoint shares."""
        self.api = api

    async def create(self, request: Request) -> Response:
        body = await self.api.body_of(request)
        gen = messages_request(body, d=self.api.defaults)
        model, backend = await self.api.serving(gen.model)
        refuse_unless_takes(gen.messages, model, backend.info)
        tools = gen.tools.tools if gen.tools else None
        stream = self.api.chat_stream(backend, gen.messages, gen.sampling, tools)
        asks = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")  # (checked by messages_request)
        shape = _Message(model, gen, self.api.thinking(gen, backend), shows_thinking=asks)
        return await respond(request, stream, gen.stream, shape.whole, lambda events: event_stream(shape.sse(events)))

    async def count_tokens(self, request: Request) -> Response:
        """POST /v1/messages/count_tokens: the request's prompt as the model sees it (template, system, tools),
        tokenized by the engine. It is evaluated as a request's prompt would be and the answer cancelled before
        its first token; the cache keeps it for the request that usually follows."""
        gen = messages_request(await self.api.body_of(request), counting=True, d=self.api.defaults)
        model, backend = await self.api.serving(gen.model)
        refuse_unless_takes(gen.messages, model, backend.info)
        tools = gen.tools.tools if gen.tools else None
        stream = self.api.start(backend, lambda sink: backend.chat(gen.messages, gen.sampling, sink, truncate=False,
                                                                   tools=tools))
        stream.disconnected = request.is_disconnected
        events = stream.events()
        try:
            async for event in events:
                if isinstance(event, P.Failed):
                    raise from_engine(event.kind, event.message)
                if isinstance(event, (P.Stats, P.Done)) and event.get("prompt_tokens") is not None:
                    return JSONResponse({"input_tokens": int(event["prompt_tokens"])})
        finally:
            await events.aclose()  # cancels the answer in the engine
        return Response(status_code=499)


# --- requests -------------------------------------------------------------
@dataclass(kw_only=True)
class MessagesBody:
    """The fields of a Messages request (Anthropic's current ones): its own ranges, narrower than OpenAI's."""

    model: str | None = None
    messages: Any = said(must="a non-empty list of messages", required=True)
    system: Any = None
    max_tokens: Annotated[int, Range(1, MAX_TOKENS_CAP)] = said(required=True)
    temperature: Annotated[float, Range(0, 1)] | None = None
    top_p: Annotated[float, Range(0, 1)] | None = None
    top_k: Annotated[int, Range(0, 1 << 20)] | None = None
    stop_sequences: str | list[str] | None = said(must=STOPS)
    stream: bool = False
    tools: Any = None
    tool_choice: Any = None
    thinking: Any = None
    output_config: Any = None
    mcp_servers: Any = None
    # Metadata, and what Claude Code sends that changes nothing here (a container, its context management's
    # hints, the betas it uses)
    metadata: Any = None
    service_tier: Any = None
    container: Any = None
    context_management: Any = None
    betas: Any = None


def messages_request(raw: Any, counting: bool = False, d: P.SamplingOptions | None = None) -> Generation:
    """The Generation a Messages request asks for; counting: only its prompt (count_tokens), so no max_tokens
    and no grammar. d: what the request leaves out (the server's defaults, app/server/options.py)."""
    if counting and isinstance(raw, dict):
        raw = {**raw, "max_tokens": 1, "stream": False}
    body = read(MessagesBody, raw)
    d = d or P.SamplingOptions()
    given = [name for name in ("temperature", "top_p", "top_k") if getattr(body, name) is not None]
    sampling = replace(
        d, max_tokens=body.max_tokens,
        temperature=d.temperature if body.temperature is None else float(body.temperature),
        top_p=d.top_p if body.top_p is None else float(body.top_p), top_k=d.top_k if body.top_k is None else body.top_k,
        stop=stop_list(body.stop_sequences, "stop_sequences") or list(d.stop),
        # What neither the request nor the server's flags give takes the model's recommendation where its file
        # has one.
        given=given_with(given, d))
    _thinking(body.thinking, None if counting else sampling.max_tokens)
    if body.mcp_servers:
        raise invalid("'mcp_servers' is not supported: this server does not connect to MCP servers; send their "
                      "tools as 'tools' and run them yourself.", "mcp_servers")
    gen = Generation(model=body.model, sampling=sampling, stream=body.stream,
                     messages=_conversation(body.system, body.messages))
    deferred = _deferred(body.tools)
    use = tool_use(_openai_tools(body.tools, body.tool_choice))
    if use is not None and use.active:
        gen.tools = use
        gen.sampling.grammar = "" if counting else tool_grammar(use)
        # A tool with defer_loading is callable but not described until the client's tool search shows it (as
        # on Anthropic's API): its schema stays in the grammar, its description out of the prompt.
        use.tools = [t for t in use.tools if t["function"]["name"] not in deferred]
    output = _output_grammar(body.output_config, counting)
    if output:
        if gen.tools:
            raise invalid("'output_config.format' cannot be combined with 'tools' here; describe the answer's format "
                          "in a tool instead.", "output_config.format")
        gen.sampling.grammar = output
    return gen


THINKING_MIN_BUDGET = 1024  # Anthropic's own least budget_tokens


def _thinking(thinking: Any, max_tokens: int | None) -> None:
    """Anthropic's extended thinking, checked as Anthropic checks it. A reasoning model thinks by its template
    whatever this says, and its thinking is not cut at the budget: a valid setting is a hint, a wrong one a 400.
    max_tokens None: count_tokens, where there is none to compare the budget with."""
    if thinking is None:
        return
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in ("enabled", "disabled", "adaptive"):
        raise invalid("'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"adaptive\"} "
                      "or {\"type\": \"disabled\"}.", "thinking")
    budget = thinking.get("budget_tokens")
    if kind != "enabled":
        if budget is not None:
            raise invalid("'thinking.budget_tokens' is only taken with \"type\": \"enabled\".",
                          "thinking.budget_tokens")
        return
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < THINKING_MIN_BUDGET:
        raise invalid(f"'thinking.budget_tokens' must be an integer of at least {THINKING_MIN_BUDGET}; got "
                      f"{budget!r}.", "thinking.budget_tokens")
    if max_tokens is not None and budget >= max_tokens:
        raise invalid(f"'thinking.budget_tokens' ({budget}) must be less than 'max_tokens' ({max_tokens}).",
                      "thinking.budget_tokens")


def _output_grammar(config: Any, counting: bool) -> str:
    """Anthropic's structured output, output_config.format {"type": "json_schema", "schema": ...}, as a grammar
    (the same converter and bounds as OpenAI's response_format); "" without one."""
    if config is None:
        return ""
    if not isinstance(config, dict):
        raise invalid("'output_config' must be an object.", "output_config")
    fmt = config.get("format")
    if fmt is None:
        return ""  # (effort: a hint for Anthropic's reasoning models, which a local model has no setting for)
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise invalid("'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}.",
                      "output_config.format")
    if counting:
        return ""
    return schema_grammar(fmt["schema"], "output_config.format.schema")


def _conversation(system: Any, messages: Any) -> list[dict]:
    """The request's system text and messages as OpenAI-style messages. System messages inside `messages` (the
    newer shape Claude Code sends under its beta header, its environment after the first user turn) join the
    system text in their order: every chat template takes one leading system message, and several refuse one
    later in the conversation."""
    texts = [] if system is None or system == "" else [system if isinstance(system, str) else _texts(system, "system")]
    messages = _messages(messages, texts)
    text = "\n\n".join(t for t in texts if t)
    return ([{"role": "system", "content": text}] if text else []) + messages


def _texts(blocks: Any, where: str) -> str:
    if not isinstance(blocks, list) or not all(isinstance(b, dict) and b.get("type") == "text"
                                               and isinstance(b.get("text"), str) for b in blocks):
        raise invalid(f"'{where}' must be a string or a list of text blocks.", where)
    return "".join(b["text"] for b in blocks)


def _messages(messages: Any, system: list[str]) -> list[dict]:
    """The user and assistant messages; the text of system messages is appended to `system`."""
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty list of messages.", "messages")
    out: list[dict] = []
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
            raise invalid(f"'{where}' must be an object whose role is 'user', 'assistant' or 'system'.", where)
        content = m.get("content")
        if m["role"] == "system":
            if not isinstance(content, (str, list)):
                raise invalid(f"'{where}.content' must be a string or a list of text blocks.", f"{where}.content")
            system.append(content if isinstance(content, str) else _texts(content, f"{where}.content"))
            continue
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
        elif isinstance(content, list):
            out += _blocks(m["role"], content, f"{where}.content")
        else:
            raise invalid(f"'{where}.content' must be a string or a list of content blocks.", f"{where}.content")
    if not out:
        raise invalid("'messages' must hold at least one user or assistant message.", "messages")
    return out


def _blocks(role: str, blocks: list, where: str) -> list[dict]:
    """One Anthropic message's blocks as OpenAI-style messages: tool results first, as tool messages. Its text alone
    is one string; with images (base64 sources) it is the seam's list of parts, in the order sent."""
    parts, calls, results = [], [], []
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        at = f"{where}.{j}"
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            parts.append(anthropic_image(block, at, role))
        elif kind == "tool_use" and role == "assistant" and isinstance(block.get("name"), str) \
                and isinstance(block.get("input", {}), dict):
            calls.append({"id": str(block.get("id") or f"toolu_{j}"), "type": "function",
                          "function": {"name": block["name"], "arguments": json.dumps(block.get("input", {}))}})
        elif kind == "tool_result" and role == "user" and isinstance(block.get("tool_use_id"), str):
            content = block.get("content", "")
            text = content if isinstance(content, str) else _texts(content, f"{at}.content")
            if block.get("is_error"):
                text = f"Error: {text}"
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # earlier reasoning is not part of the answer's text
        else:
            raise invalid(f"'{at}': this server reads text, image (user), tool_use (assistant) and tool_result (user) "
                          f"blocks; a {kind or type(block).__name__!r} block cannot be read here.", at)
    media = any(part["type"] != "text" for part in parts)
    message = {"role": role, "content": parts if media else "".join(part["text"] for part in parts)}
    if calls:
        message["tool_calls"] = calls
    return results + ([message] if parts or calls or not results else [])


def _openai_tools(tools: Any, choice: Any) -> dict:
    """Anthropic's tools and tool_choice in OpenAI's terms, for tool_use() to check."""
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise invalid("'tools' must be a list of tools.", "tools")
    functions = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise invalid(f"'tools.{i}' must be an object with 'name' and 'input_schema'.", f"tools.{i}")
        if tool.get("type") not in (None, "custom"):
            # Anthropic's own tools (web_search_..., bash_..., text_editor_...) run on its servers or have schemas
            # only its models know: answering without them would change the answer.
            raise invalid(f"'tools.{i}.type': {str(tool.get('type'))[:80]!r} is one of Anthropic's own tools, which "
                          "this server does not have; give each tool as a name, a description and an "
                          "input_schema.", f"tools.{i}.type")
        functions.append({"type": "function", "function": {
            "name": tool.get("name"), "description": tool.get("description", ""),
            "parameters": tool.get("input_schema", {"type": "object", "properties": {}})}})
    choice = choice or {"type": "auto"}
    if not isinstance(choice, dict):
        raise invalid("'tool_choice' must be an object such as {\"type\": \"auto\"}.", "tool_choice")
    kind = choice.get("type")
    openai_choice: Any = {"auto": "auto", "any": "required", "none": "none"}.get(kind)
    if kind == "tool":
        openai_choice = {"type": "function", "function": {"name": choice.get("name")}}
    elif openai_choice is None:
        raise invalid("'tool_choice.type' must be 'auto', 'any', 'tool' or 'none'.", "tool_choice")
    return {"tools": functions, "tool_choice": openai_choice,
            "parallel_tool_calls": not choice.get("disable_parallel_tool_use", False)}


def _deferred(tools: Any) -> set[str]:
    """The names of the tools sent with defer_loading (Anthropic's tool search beta)."""
    return {t.get("name") for t in tools if isinstance(t, dict) and t.get("defer_loading") is True} \
        if isinstance(tools, list) else set()


# --- answers ----------------------------------------------------------------
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "context_full": "max_tokens", "cancelled": "end_turn"}


class _Message:
    """Anthropic's response objects for one request."""

    def __init__(self, model: str, gen: Generation, thinking: bool | None = None, shows_thinking: bool = False):
        """thinking: how a reasoning model's thinking is split off the answer, as on the other endpoints (None: left
        in the text, reasoning_format none; else whether the answer starts inside it). shows_thinking: the request
        asked for thinking, which comes back as thinking blocks; else it is left out, as Anthropic's API shows none
        a request did not ask for. Either way the calls and text are read from the answer without it."""
        self.model, self.gen = model, gen
        self.id = "msg_" + secrets.token_hex(12)
        self.calls = CallReader(gen.tools.names) if gen.tools else None
        self.opened, self.shows_thinking = thinking, shows_thinking
        self.splitter = ReasoningSplitter(thinking) if thinking is not None else None

    def _stop(self, done: P.Done) -> tuple[str, str | None]:
        if limit_cut(done, self.calls):  # one rule for every endpoint: complete calls delivered, the cut said
            return "max_tokens", None
        if self.calls is not None and self.calls.calls:
            return "tool_use", None
        if done.get("stop_sequence"):
            return "stop_sequence", done["stop_sequence"]
        return STOP_REASONS.get(done.get("finish_reason"), "end_turn"), None

    @staticmethod
    def usage(done: P.Done) -> dict:
        prompt, completion, cached = token_counts(done)
        return {"input_tokens": prompt - cached, "cache_read_input_tokens": cached, "output_tokens": completion}

    def _head(self) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model}

    def whole(self, text: str, done: P.Done) -> dict:
        content = []
        reasoning, text, calls = whole_parts(text, self.opened, self.calls)
        if reasoning and self.shows_thinking:
            content.append(_thinking_block(reasoning))
        if text:
            content.append({"type": "text", "text": text})
        content += [_tool_use(call) for call in calls]
        reason, sequence = self._stop(done)
        return {**self._head(), "content": content, "stop_reason": reason, "stop_sequence": sequence,
                "usage": self.usage(done)}

    async def sse(self, events: AsyncIterator[P.Event]) -> AsyncIterator[bytes]:
        first = await anext(events, None)
        # The engine's first event of an answer is its prompt's figures; a remote backend's may be a token.
        usage = self.usage(first) if isinstance(first, P.Stats) else {"input_tokens": 0, "output_tokens": 0}
        yield named_sse({"type": "message_start", "message": {
            **self._head(), "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}})
        blocks = _Blocks()
        async for event in chain(first, events):
            if isinstance(event, (P.Token, P.Done)):
                for chunk in self._pieces(blocks, event.text if isinstance(event, P.Token) else ""):
                    yield chunk
            if isinstance(event, P.Done):
                for chunk in blocks.close():
                    yield chunk
                reason, sequence = self._stop(event)
                yield named_sse({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                 "usage": self.usage(event)})
                yield named_sse({"type": "message_stop"})
            elif isinstance(event, P.Failed):  # after the first token: the status is sent already
                yield named_sse(from_engine(event.kind, event.message).anthropic_body())

    def _pieces(self, blocks: "_Blocks", text: str) -> list[bytes]:
        """The events one piece of the answer makes ("" at its end): its thinking, its text, and the tool calls it
        completes."""
        reasoning, parts = stream_parts(self.splitter, self.calls, text)
        events = blocks.thinking(reasoning) if reasoning and self.shows_thinking else []
        for piece, calls in parts:
            events += blocks.text(piece)
            for call in calls:
                events += blocks.tool_use(call)
        return events


class _Blocks:
    """The content-block events of a streamed message, opening and closing blocks as the answer goes."""

    def __init__(self):
        self.index = -1
        self.open_kind: str | None = None
        self._delta: TextFrame | None = None  # the open text block's delta frame

    def _start(self, block: dict) -> list[bytes]:
        events = self.close()
        self.index += 1
        self.open_kind = block["type"]
        events.append(named_sse({"type": "content_block_start", "index": self.index, "content_block": block}))
        if self.index == 0:  # Anthropic's own stream pings once, after the first block starts
            events.append(named_sse({"type": "ping"}))
        return events

    def text(self, text: str) -> list[bytes]:
        if not text:
            return []
        if self.open_kind != "text":
            events = self._start({"type": "text", "text": ""})
            # Every token of this block in one encoded template (answers.TextFrame): the same bytes, less work.
            self._delta = TextFrame({"type": "content_block_delta", "index": self.index,
                                     "delta": {"type": "text_delta", "text": TextFrame.SLOT}},
                                    head=b"event: content_block_delta\ndata: ")
        else:
            events = []
        events.append(self._delta(text))
        return events

    def thinking(self, text: str) -> list[bytes]:
        events = self._start(_thinking_block("")) if self.open_kind != "thinking" else []
        events.append(named_sse({"type": "content_block_delta", "index": self.index,
                                 "delta": {"type": "thinking_delta", "thinking": text}}))
        return events

    def tool_use(self, call: ToolCall) -> list[bytes]:
        events = self._start({**_tool_use(call), "input": {}})
        events.append(named_sse({"type": "content_block_delta", "index": self.index,
                                 "delta": {"type": "input_json_delta", "partial_json": call.arguments}}))
        return events + self.close()

    def close(self) -> list[bytes]:
        if self.open_kind is None:
            return []
        self.open_kind = None
        return [named_sse({"type": "content_block_stop", "index": self.index})]


def _thinking_block(text: str) -> dict:
    """A reasoning model's thinking as Anthropic's thinking block; its signature is empty (nothing here signs it, and
    a thinking block sent back is left out of the prompt: _blocks)."""
    return {"type": "thinking", "thinking": text, "signature": ""}


def _tool_use(call: ToolCall) -> dict:
    return {"type": "tool_use", "id": "toolu_" + secrets.token_hex(12), "name": call.name, "input": call.input}

