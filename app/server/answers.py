"""What every endpoint does with a backend request's events, whatever the dialect (OpenAI, Anthropic).

An engine error that comes before the first event gets its own status (even for a streaming request, whose
status line is not sent yet); a client that leaves before then cancels the request in the engine.
"""

from __future__ import annotations

import json
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from app.engine import protocol as P
from app.server.errors import from_engine
from app.server.streams import EngineStream


async def open_answer(request: Request, stream: EngineStream, streaming: bool) -> AsyncIterator[P.Event] | None:
    """The request's events from the first on; None when the client left before the first came."""
    stream.disconnected = request.is_disconnected
    events = stream.events()
    first = await anext(events, None)
    if first is None:
        return None
    if isinstance(first, P.Failed):
        raise from_engine(first.kind, first.message)
    if streaming:
        # From here the streaming response listens for the disconnect itself (see EngineStream).
        stream.disconnected = None
    return chain(first, events)


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


def token_counts(done: P.Done) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) tokens; a backend that cannot count (a remote server) says None: 0."""
    prompt, completion = int(done.get("prompt_tokens") or 0), int(done.get("completion_tokens") or 0)
    evaluated = done.get("prompt_evaluated")
    cached = max(prompt - int(evaluated), 0) if evaluated is not None else 0
    return prompt, completion, cached


def prediction_counts(done: P.Done) -> tuple[int, int]:
    """OpenAI's (accepted, rejected) prediction tokens (app/engine/prediction.py counts them); 0, 0 without one."""
    counts = done.get("prediction")
    if not isinstance(counts, dict):
        return 0, 0
    return int(counts.get("accepted") or 0), int(counts.get("rejected") or 0)


def event_stream(chunks: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def compact_json(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
