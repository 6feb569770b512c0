"""A backend request as an asyncio stream of events, cancelled when the client goes away.

The backend calls a request's sink on its own thread (the engine pipe's reader). The sink appends the event
to the stream's queue and wakes the server's event loop only when no wake-up is on its way already: each
call_soon_threadsafe is a write to the loop's self-pipe and a wake-up, and on a machine whose cores are all
busy with llama.cpp's threads every wake-up preempts one of them. When the handler falls behind the engine
(its thread was preempted, the client reads slowly), the plain token events waiting are handed on as one
piece: several tokens per write only when the client is slower than the engine, never as a delay.

A handler that stops listening (the client disconnected, the stream was closed) cancels the request in the
engine, which stops within a token and frees it for the next request.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import AsyncIterator, Awaitable, Callable

from app.protocol import messages as P
from app.backends.backend import Backend

DISCONNECT_CHECK_S = 0.25
_PLAIN_TOKEN = {"ev", "text", "id"}  # a token event with nothing else (no logprobs, no draft figures) merges


class EngineStream:
    def __init__(self, backend: Backend, start: Callable[[Callable[[P.Event], None]], int]):
        """start(sink) sends the request and returns its id (raising its HearthError if it cannot start)."""
        self.backend = backend
        self._loop = asyncio.get_running_loop()
        self._pending: deque = deque()  # appended on the backend's thread, taken on the loop's
        self._signalled = False  # a wake-up is scheduled and has not run yet
        self._waiter: asyncio.Future | None = None
        self.finished = False
        # Polled while no event comes. Only before a streaming response starts: from then on the
        # response itself listens for the disconnect (and cancels this stream), and two listeners
        # would take each other's messages.
        self.disconnected: Callable[[], Awaitable[bool]] | None = None
        self.request_id = start(self._sink)

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
            if not self.finished:
                self.backend.cancel(self.request_id)
