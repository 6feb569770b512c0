"""What every endpoint does with a backend request's events, whatever the dialect (OpenAI, Anthropic).

An engine error that comes before the first event gets its own status (even for a streaming request, whose
status line is not sent yet); a client that leaves before then cancels the request in the engine. A request that
only waited behind a step the watchdog ended (it has no grammar to have stalled it) is sent again, not failed; so
is a plain (not streamed) one whose answer was under way, since none of it has reached its client, and a streamed
one under way goes on from the text its client already has.
"""

from __future__ import annotations

import json
from typing import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from app.core.chats.reasoning import ReasoningSplitter, split
from app.protocol import messages as P
from app.server.edge.errors import from_engine, stalled
from app.server.edge.streams import EngineStream
from app.server.tools import CallReader, ToolCall, answer_piece

# Our finish reasons as OpenAI's: an answer the context cut short ran out of room, as "length" says.
FINISH = {"stop": "stop", "length": "length", "context_full": "length", "cancelled": "stop"}
LIMITS = ("length", "context_full")  # the token limit or the context ended the answer


def limit_cut(done: P.Done | dict, calls: CallReader | None) -> bool:
    """Whether the token limit (or the context) cut something off the answer: one rule for every endpoint (#54.6),
    in the API guide. The complete tool calls are delivered either way; the answer was cut when it ended at the
    limit while writing something after them (another call, text). Chat completions said "tool_calls" for two
    complete calls and a third cut off, the Responses API "incomplete" for the same answer. Without a complete call
    the limit cut the answer whatever it wrote (a thinking the limit cut leaves no text to the call reader)."""
    if done.get("finish_reason") not in LIMITS:
        return False
    return calls is None or not calls.calls or bool(calls.after_calls.strip())


def finish_reason(done: P.Done | dict, called: bool, cut: bool) -> str:
    """A chat completion's finish_reason: "length" where the limit cut the answer (limit_cut), else "tool_calls"
    where it called the client's tools."""
    if cut:
        return "length"
    return "tool_calls" if called else FINISH.get(done.get("finish_reason"), "stop")


async def open_answer(request: Request, stream: EngineStream, streaming: bool) -> AsyncIterator[P.Event] | None:
    """The request's events from the first on; None when the client left before the first came (for a plain answer:
    before its end)."""
    stream.disconnected = request.is_disconnected
    if not streaming:
        whole = await _whole(stream)
        if whole is None:
            return None
        if isinstance(whole[0], P.Failed):
            raise from_engine(whole[0].kind, whole[0].message)
        return _replay(whole)
    events = stream.events()
    first = await anext(events, None)
    if isinstance(first, P.Failed) and stream.again and stalled(first.kind, first.message):
        # It only waited behind the step that stalled (another slot's grammar): it is answered, not failed.
        await events.aclose()  # the end of its first life, before its second begins (a late close would cancel it)
        if not await stream.restart():
            return None
        events = stream.events()
        first = await anext(events, None)
    if first is None:
        return None
    if isinstance(first, P.Failed):
        raise from_engine(first.kind, first.message)
    if streaming:
        # From here the streaming response listens for the disconnect itself (see EngineStream).
        stream.disconnected = None
    if stream.again and stream.resumable:
        return _going_on(stream, first, events)
    return chain(first, events)


async def respond(request: Request, stream: EngineStream, streaming: bool, whole: Callable[[str, P.Done], dict],
                  streamed: Callable[[AsyncIterator[P.Event]], Response]) -> Response:
    """A request's answer in its dialect's shape: streamed(events) while it streams, else the object whole(text,
    done) makes of the whole answer; 499 when the client left before the first event (a plain answer: its end)."""
    events = await open_answer(request, stream, streaming)
    if events is None:
        return Response(status_code=499)
    if streaming:
        return streamed(events)
    text, done = await whole_answer(events)
    if done is None:
        return Response(status_code=499)
    return JSONResponse(whole(text, done))


async def _going_on(stream: EngineStream, event: P.Event, events: AsyncIterator[P.Event]) -> AsyncIterator[P.Event]:
    """A streamed answer without a grammar, whose engine the watchdog ended for another slot's stalled step while
    it ran beside it (the Supervisor's `beside`): it could not have stalled the step, and its client has part of
    it, so once the engine is back it goes on from that text (EngineStream.restart(so_far)) instead of failing
    (issue 56 B5: the plain answer was sent again; the streamed one still got the stall's error). Its client sees
    one answer: the tokens before and after, and a Done whose counts are the whole answer's. Its token budget goes
    on from the last figures (Stats, every 0.2 s), so the answer may run a few tokens past max_tokens."""
    text: list[str] = []
    used = prompt = 0
    while event is not None:
        if (isinstance(event, P.Failed) and stream.again and event.get("beside")
                and stalled(event.kind, event.message)):
            await events.aclose()
            if not await stream.restart("".join(text), used):
                yield event  # the engine did not come back in time: the error stands
                return
            events = stream.events()
            event = await anext(events, None)
            continue
        if isinstance(event, P.Token) and stream.again:
            text.append(event.text)
        elif isinstance(event, P.Stats):
            if stream.again:  # the figures of its first life: how far it got
                used, prompt = int(event.get("completion_tokens") or used), int(event.get("prompt_tokens") or prompt)
            else:
                event = P.Stats({**event, "completion_tokens": used + int(event.get("completion_tokens") or 0)})
        elif isinstance(event, P.Done) and not stream.again:  # the end of its second life: the whole answer's counts
            # What the first life wrote is now part of the prompt: its tokens are the prompt's growth.
            before = max(used, int(event.get("prompt_tokens") or 0) - prompt) if prompt else used
            event = P.Done({**event, "text": "".join(text) + str(event.get("text") or ""),
                            "completion_tokens": before + int(event.get("completion_tokens") or 0),
                            **({"prompt_tokens": prompt} if prompt else {})})
        yield event
        if isinstance(event, (P.Done, P.Failed)):
            return
        event = await anext(events, None)


async def _whole(stream: EngineStream) -> list[P.Event] | None:
    """Every event of a plain answer, up to its Done or Failed; None when the client left first. Its client sees
    nothing before the end, so a request the watchdog ended that cannot have stalled the engine itself (stream.again:
    it has no grammar) is sent again from its start if it only waited or if its answer ran beside others' (the
    Supervisor's `beside`): on --parallel 2 an answer under way beside another slot's stalled step was failed with
    that step's 422, told not to retry (issue 56 B5). One that ran alone is what stalled: it is told so."""
    while True:
        got = [event async for event in stream.events()]  # the events end at a Done, a Failed or the client's leaving
        last = got[-1] if got else None
        if (isinstance(last, P.Failed) and stream.again and stalled(last.kind, last.message)
                and (len(got) == 1 or last.get("beside"))):
            if not await stream.restart():  # the client left meanwhile, or the engine did not come back
                return None
            continue
        return got if isinstance(last, (P.Done, P.Failed)) else None


async def _replay(events: list[P.Event]) -> AsyncIterator[P.Event]:
    for event in events:
        yield event


async def chain(first: P.Event, rest: AsyncIterator[P.Event]) -> AsyncIterator[P.Event]:
    yield first
    async for event in rest:
        yield event


async def whole_answer(events: AsyncIterator[P.Event]) -> tuple[str, P.Done | None]:
    """The answer's text and its Done (None: the client left); raises the ApiError of an engine error."""
    text, done = [], None
    async for event in events:
        if isinstance(event, P.Token):
            text.append(event.text)
        elif isinstance(event, P.Done):
            done = event
        elif isinstance(event, P.Failed):
            raise from_engine(event.kind, event.message)
    return "".join(text), done


def whole_parts(text: str, thinking: bool | None, calls: CallReader | None) -> tuple[str, str, list[ToolCall]]:
    """A whole answer as (reasoning, content, tool calls), split as its stream is, so a request gets the same answer
    streamed or not. thinking None leaves the thinking in the text (else: whether the answer starts inside it);
    calls None reads no calls."""
    reasoning = ""
    if thinking is not None:
        parts = split(text, thinking)
        reasoning, text = parts.reasoning, parts.content
    if calls is None:
        return reasoning, text, []
    calls.feed(text)
    return reasoning, calls.content, calls.calls  # markup never; a call cut off, as text


def stream_parts(thinking: ReasoningSplitter | None, calls: CallReader | None,
                 piece: str) -> tuple[str, list[tuple[str, list[ToolCall]]]]:
    """One piece of a streamed answer ("" at its end) as (its thinking, [(content, calls it completed), ...]), split
    as whole_parts splits a whole answer: the thinking first (thinking None: left in the text), then the text to the
    call reader, then at the end "" for what it held back as a possible call's start. Only text the piece has goes
    to the reader, since "" is the answer's end to it: a piece all thinking must not end it (a call written after
    the thinking then came out as text)."""
    end, reasoning = not piece, ""
    if thinking is not None:
        reasoning, piece = thinking.finish() if end else thinking.feed(piece)
    return reasoning, [answer_piece(calls, part) for part in ([piece] if piece else []) + ([""] if end else [])]


def token_counts(done: P.Done) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) tokens; a backend that cannot count (a remote server) says None: 0."""
    prompt, completion = int(done.get("prompt_tokens") or 0), int(done.get("completion_tokens") or 0)
    evaluated = done.get("prompt_evaluated")
    cached = max(prompt - int(evaluated), 0) if evaluated is not None else 0
    return prompt, completion, cached


def prediction_counts(done: P.Done) -> tuple[int, int]:
    """OpenAI's (accepted, rejected) prediction tokens (app/engine/speculation/prediction.py counts them); 0, 0 without one."""
    counts = done.get("prediction")
    if not isinstance(counts, dict):
        return 0, 0
    return int(counts.get("accepted") or 0), int(counts.get("rejected") or 0)


def chat_usage(done: P.Done) -> dict:
    """The usage object of OpenAI's chat and text completions."""
    prompt, completion, cached = token_counts(done)
    accepted, rejected = prediction_counts(done)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": 0, "accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": rejected}}


def event_stream(chunks: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def compact_json(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


_json_string = json.encoder.encode_basestring  # json.dumps(text, ensure_ascii=False) for a str, in C


class TextFrame:
    """One streamed object's bytes with its text as the only part that changes, from one template.

    Every token of a stream goes out in the same object (OpenAI's chunk, Anthropic's text delta) with only
    the text different. Building the dict and encoding all of it again per token was most of the server's
    work per token; the frame is encoded once and each token costs one string encoding. The bytes are the
    ones compact_json gives for the same object (tests/server/edge/test_stream_path.py holds them to it).
    """

    SLOT = "\ue000hearth-text\ue000"  # private-use characters: in no id or model name around it

    def __init__(self, template: dict, head: bytes = b"data: ", tail: bytes = b"\n\n"):
        """template: the object with the text's place marked by TextFrame.SLOT."""
        whole = compact_json(template)
        slot = compact_json(self.SLOT)  # a str encodes as its JSON string
        before, found, after = whole.partition(slot)
        if not found or slot in after:
            raise ValueError("a frame's template holds its text's place exactly once")
        self._head, self._tail = head + before, after + tail

    def __call__(self, text: str) -> bytes:
        return self._head + _json_string(text).encode("utf-8") + self._tail


def sse_data(obj: dict) -> bytes:
    """One server-sent event of OpenAI's chat and text completion streams."""
    return b"data: " + compact_json(obj) + b"\n\n"


def named_sse(obj: dict) -> bytes:
    """One server-sent event named by its object's type, as Anthropic's and the Responses API's events are."""
    return b"event: " + obj["type"].encode() + b"\ndata: " + compact_json(obj) + b"\n\n"
