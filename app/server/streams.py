"""A backend request as an asyncio stream of events, cancelled when the client goes away.

The backend calls a request's sink on its own thread; the sink hands each event to the server's event
loop (call_soon_threadsafe), where the request's handler awaits them in order. A handler that stops
listening (the client disconnected, the stream was closed) cancels the request in the engine, which
stops within a token and frees it for the next request.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable

from app.engine import protocol as P
from app.backends.backend import Backend

DISCONNECT_CHECK_S = 0.25


class EngineStream:
    def __init__(self, backend: Backend, start: Callable[[Callable[[P.Event], None]], int]):
        """start(sink) sends the request and returns its id (raising its HearthError if it cannot start)."""
        self.backend = backend
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue = asyncio.Queue()
        self.finished = False
        # Polled while no event comes. Only before a streaming response starts: from then on the
        # response itself listens for the disconnect (and cancels this stream), and two listeners
        # would take each other's messages.
        self.disconnected: Callable[[], Awaitable[bool]] | None = None
        self.request_id = start(self._sink)

    def _sink(self, event: P.Event) -> None:
        self._loop.call_soon_threadsafe(self._events.put_nowait, event)

    async def events(self) -> AsyncIterator[P.Event]:
        """Each event of the request up to its Done or Failed; cancels the request if the caller leaves early."""
        try:
            while True:
                if self.disconnected is None:
                    # Nothing to poll (a streaming response listens for the disconnect itself): a plain wait,
                    # as wait_for costs a task and a timer per call, paid for every token of every stream.
                    event = await self._events.get()
                else:
                    try:
                        event = await asyncio.wait_for(self._events.get(), DISCONNECT_CHECK_S)
                    except asyncio.TimeoutError:
                        if await self.disconnected():
                            return
                        continue
                if isinstance(event, (P.Done, P.Failed)):
                    self.finished = True
                yield event
                if self.finished:
                    return
        finally:
            if not self.finished:
                self.backend.cancel(self.request_id)
