"""A backend request as an asyncio stream of events, cancelled when the client goes away.

The backend calls a request's sink on its own thread (the engine pipe's reader). The sink appends the event
to the stream's queue and wakes the server's event loop only when no wake-up is on its way already: each
call_soon_threadsafe is a write to the loop's self-pipe and a wake-up, and on a machine whose cores are all
busy with llama.cpp's threads every wake-up preempts one of them. When the handler falls behind the engine
(its thread was preempted, the client reads slowly), the plain token events waiting are handed on as one
piece: several tokens per write only when the client is slower than the engine, never as a delay.

A handler that stops listening (the client disconnected, the stream was closed) cancels the request in the
engine, which stops within a token and frees it for the next request. A client that waits for a whole
answer is checked for every DISCONNECT_CHECK_S while the tokens come, not only while none comes: a request
that keeps generating after its client left (the official clients retry on a timeout) held the engine for
the rest of its max_tokens (issue 48).

Every HTTP request runs inside one request_scope (app/server/openai/endpoints.py): whatever way the request ends
(an answer, an error at any stage, a client gone, a send deadline past), the engine requests it started and
did not finish are cancelled when it leaves. Handlers need not close their streams on each error path, nor give
back what else they hold for the request's lifetime (close_with_request: memory a continuation reads).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import deque
from contextlib import contextmanager
from typing import AsyncIterator, Awaitable, Callable, Iterator

from app.core.errors import HearthError
from app.protocol import messages as P
from app.backends.backend import Backend

DISCONNECT_CHECK_S = 0.25
# A request the engine's watchdog ended before it started (it waited behind the step that stalled), or a plain one
# whose answer had not reached its client, is sent again once the engine is back with its model: within this long,
# looking this often.
RESTART_WAIT_S = 120.0
RESTART_LOOK_S = 0.2
_PLAIN_TOKEN = {"ev", "text", "id"}  # a token event with nothing else (no logprobs, no draft figures) merges
# The streams the HTTP request being handled has started, and whatever else it holds until it ends
# (request_scope): anything with a close(). A task the request starts (a streaming response's) sees the same list.
_OPEN: contextvars.ContextVar[list | None] = contextvars.ContextVar("hearth_engine_streams", default=None)


@contextmanager
def request_scope() -> Iterator[None]:
    """The lifetime of one HTTP request's engine requests: those still running when it ends are cancelled."""
    streams: list = []
    token = _OPEN.set(streams)
    try:
        yield
    finally:
        _OPEN.reset(token)
        for stream in streams:
            stream.close()
        # A kept-alive connection holds on to its last request's context until its next request: what the
        # streams were started with (a whole stored conversation) must not stay with it (thirty connections held
        # 20 MB each).
        streams.clear()


def close_with_request(thing) -> bool:
    """Close `thing` when the HTTP request being handled ends, however it ends (an answer streamed to its end, an
    error, a client gone); False outside a request (the caller closes it)."""
    held = _OPEN.get()
    if held is None:
        return False
    held.append(thing)
    return True


class EngineStream:
    def __init__(self, backend: Backend, start: Callable[..., int], again: bool = False, resumable: bool = False):
        """start(sink) sends the request and returns its id (raising its HearthError if it cannot start).
        again: the request may be sent once more if the engine's watchdog ended it before its first event, or
        before its end where its client waits for the whole answer (app/server/answers.py), for it cannot be what
        stalled the engine: it has no grammar. resumable: start(sink, so_far, used) goes on from the answer's text
        its client already has (a streamed answer's second life)."""
        self.backend = backend
        self._start = start
        self.again = again
        self.resumable = resumable
        self._loop = asyncio.get_running_loop()
        self._pending: deque = deque()  # appended on the backend's thread, taken on the loop's
        self._signalled = False  # a wake-up is scheduled and has not run yet
        self._waiter: asyncio.Future | None = None
        self.finished = False
        # Polled while no event comes. Only before a streaming response starts: from then on the
        # response itself listens for the disconnect (and cancels this stream), and two listeners
        # would take each other's messages.
        self.disconnected: Callable[[], Awaitable[bool]] | None = None
        self._check_at = 0.0  # when `disconnected` is next polled while events keep coming
        self.request_id = start(self._sink)
        streams = _OPEN.get()
        if streams is not None:
            streams.append(self)

    async def restart(self, so_far: str = "", used: int = 0) -> bool:
        """Send the request again once the engine is back from a watchdog's restart (once: `again` goes off);
        False when the client left meanwhile or the engine did not come back within RESTART_WAIT_S.
        so_far: the answer its client has already had (used: its tokens), which the request goes on from; only
        where start takes them (a chat or completion stream, `resumable`)."""
        self.again = False
        if so_far:
            original = self._start
            self._start = lambda sink: original(sink, so_far, used)
        start = self._start
        deadline = time.monotonic() + RESTART_WAIT_S
        while time.monotonic() < deadline:
            if self.disconnected is not None and await self.disconnected():
                return False
            if self.backend.ready:
                try:
                    self._pending.clear()
                    self.finished = False
                    self.request_id = start(self._sink)
                    return True
                except HearthError:  # still loading: the next look
                    pass
            await asyncio.sleep(RESTART_LOOK_S)
        return False

    def close(self) -> None:
        """Cancel the request in the engine unless it has ended; any number of times."""
        if not self.finished:
            self.finished = True
            self.backend.cancel(self.request_id)

    def _sink(self, event: P.Event) -> None:
        self._pending.append(event)
        # Read after the append: either this schedules a wake-up that runs after it, or one scheduled
        # earlier has not yet run (it clears the flag before it wakes the handler, which then takes all).
        if not self._signalled:
            self._signalled = True
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._signalled = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _next(self) -> P.Event | None:
        """The next event (plain tokens waiting merged into one); None when the client left meanwhile."""
        if self.disconnected is not None:  # polled while the events keep coming too, not only while none comes
            now = time.monotonic()
            if now >= self._check_at:
                self._check_at = now + DISCONNECT_CHECK_S
                if await self.disconnected():
                    return None
        while not self._pending:
            self._waiter = self._loop.create_future()
            try:
                if self.disconnected is None:
                    # Nothing to poll (a streaming response listens for the disconnect itself): a plain wait,
                    # as wait_for costs a task and a timer per call, paid for every token of every stream.
                    await self._waiter
                else:
                    try:
                        await asyncio.wait_for(self._waiter, DISCONNECT_CHECK_S)
                    except asyncio.TimeoutError:
                        if await self.disconnected():
                            return None
            finally:
                self._waiter = None
        event = self._pending.popleft()
        if len(self._pending) and isinstance(event, P.Token) and event.keys() <= _PLAIN_TOKEN:
            texts = [event.text]
            while self._pending and isinstance(self._pending[0], P.Token) and self._pending[0].keys() <= _PLAIN_TOKEN:
                texts.append(self._pending.popleft().text)
            if len(texts) > 1:
                event = P.Token({**event, "text": "".join(texts)})
        return event

    async def events(self) -> AsyncIterator[P.Event]:
        """Each event of the request up to its Done or Failed; cancels the request if the caller leaves early."""
        try:
            while True:
                event = await self._next()
                if event is None:
                    return
                if isinstance(event, (P.Done, P.Failed)):
                    self.finished = True
                yield event
                if self.finished:
                    return
        finally:
            self.close()
