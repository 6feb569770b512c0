"""Limits on connections and waiting requests, so that no client can hold the server by never finishing or
by never stopping: a deadline for a request's head, a cap on open connections, and a bounded queue.

- **The request head** (request line and headers) must arrive within `head_timeout_s` of the connection
  opening, or of the previous answer on a kept-alive connection; a socket that sends a byte a second
  (slowloris) gets a 408 and is closed, one that sent nothing is closed. uvicorn has no such deadline: its
  keep-alive timer runs only between requests and every byte received resets it, and an ASGI middleware
  sees a request only once its head is complete. So this is a subclass of uvicorn's own HTTP protocol
  (httptools, or h11 without it), the one place that sees the bytes arrive.
- **The body** must arrive within `body_timeout_s` once the head has (app/server/edge/guard.py reads it): 408.
- **The answer** must be taken: a client that stops reading with its socket open (a stream left paused)
  is dropped once nothing it was sent has been taken for `send_timeout_s`, and the request's engine slot
  is freed with the connection (app/server/edge/streams.py's request_scope). Waiting for the write to block is
  not enough: the kernel takes megabytes before a write blocks (1.6 MB on loopback here, a minute and more
  of a token stream), so the deadline reads the bytes still unsent in the kernel too (SIOCOUTQ on Linux,
  SO_NWRITE on macOS; elsewhere only Python's own buffer, which fills once the kernel's has).
- **Open connections** beyond `max_connections` get a 503 with Retry-After to their request, then are
  closed (uvicorn's own limit_concurrency answers in plain text, without Retry-After).
- **Generation requests** (chat, completions, messages, count_tokens, embeddings, responses) beyond the model's
  slots plus `max_queue` waiting get a 503 with Retry-After at once, as Ollama's OLLAMA_MAX_QUEUE does, instead
  of waiting without end. Official clients retry a 503 after Retry-After.
- **Memory that requests read from the server's own stores** (the stored conversations that /v1/responses
  continues) is shared out by a MemoryBudget: a request that needs more than is free waits its turn, holding
  only its body, and gives it back when it ends.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections import deque
from typing import Awaitable, Callable

from app.server.options import Limits  # declared with ServeOptions: hearth serve's flags

RETRY_AFTER_S = 2
# The endpoints that take an engine slot (count_tokens evaluates its prompt; models and health answer at once):
# OpenAI's, Anthropic's and the Responses API's, each also without its /v1 (the endpoints answer there too), and
# Ollama's. A path left out here would be a way around the queue's bound.
QUEUED_PATHS = frozenset(
    [prefix + path for path in ("/chat/completions", "/completions", "/messages", "/messages/count_tokens",
                                "/embeddings", "/responses") for prefix in ("/v1", "")]
    + ["/api/chat", "/api/generate", "/api/embed", "/api/embeddings"])
WAIT_CHECK_S = 0.25  # how often a request waiting for memory looks whether its client is still there


def busy_error(message: str, code: str, close: bool = False):
    from app.server.edge.errors import ApiError

    headers = {"Retry-After": str(RETRY_AFTER_S)}
    if close:
        headers["Connection"] = "close"
    return ApiError(503, message, "unavailable_error", code=code, headers=headers)


def http_protocol(limits: Limits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (Config(http=...)) with the head deadline and the connection cap."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class LimitedProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        _head_timer: asyncio.TimerHandle | None = None
        _head_of = None  # the request cycle current when the deadline was armed: a new one means a head came
        _head_bytes = 0

        _send_watch: "_SendWatch | None" = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self.app = _too_many_connections  # this connection's requests: a 503, then it closes
            self._arm_head_deadline()
            self._send_watch = _SendWatch(self, limits.send_timeout_s)

        def data_received(self, data: bytes) -> None:
            self._head_bytes += len(data)
            super().data_received(data)
            if self._head_timer is not None and self.cycle is not self._head_of:
                self._disarm_head_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self._head_timer is None:
                self._arm_head_deadline()  # the next request on a kept-alive connection

        def connection_lost(self, exc) -> None:
            self._disarm_head_deadline()
            if self._send_watch is not None:
                self._send_watch.stop()
            super().connection_lost(exc)

        def _arm_head_deadline(self) -> None:
            self._disarm_head_deadline()
            self._head_of, self._head_bytes = self.cycle, 0
            self._head_timer = self.loop.call_later(limits.head_timeout_s, self._head_too_slow)

        def _disarm_head_deadline(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_slow(self) -> None:
            self._head_timer = None
            cycle = self.cycle
            if self.transport.is_closing() or cycle is not self._head_of or (cycle is not None and
                                                                             not cycle.response_complete):
                return  # a head came (or an answer is still going out)
            if self._head_bytes:  # part of a head: say why; an idle connection is just closed
                from app.server.edge.errors import ApiError

                body = json.dumps(ApiError(408, "The request's head (its request line and headers) did not arrive "
                                                f"within {limits.head_timeout_s:g} s.", code="request_timeout").body())
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                                     b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                                     % (len(body), body.encode()))
            self.transport.close()

    return LimitedProtocol


class _SendWatch:
    """The send deadline of one connection: every tick, how many of the bytes written the client has taken
    (written, less those still in Python's buffer and in the kernel's); pending bytes with none taken for
    `timeout_s` abort the connection. uvicorn then reports the disconnect to the request, which ends, and
    its engine request with it."""

    def __init__(self, protocol, timeout_s: float):
        self.protocol, self.timeout_s = protocol, timeout_s
        self.transport = protocol.transport
        self.counter = _CountingTransport(self.transport)
        protocol.transport = self.counter  # uvicorn writes every response through protocol.transport
        self.loop = protocol.loop
        self.taken = 0
        self.since = self.loop.time()  # when the client last took something (or had nothing to take)
        self.interval = min(max(timeout_s / 4, 0.05), 1.0)
        self.timer: asyncio.TimerHandle | None = self.loop.call_later(self.interval, self.tick)

    def tick(self) -> None:
        self.timer = None
        if self.transport.is_closing():
            return
        pending = self.transport.get_write_buffer_size() + unsent_bytes(self.transport)
        taken = self.counter.written - pending
        now = self.loop.time()
        if pending <= 0 or taken > self.taken:
            self.taken, self.since = taken, now
        elif now - self.since > self.timeout_s:
            self.transport.abort()  # close() would wait for the buffer to drain, which is the problem
            return
        self.timer = self.loop.call_later(self.interval, self.tick)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class _CountingTransport:
    """A transport that counts the bytes written through it (and is the transport for all else)."""

    def __init__(self, transport):
        self._transport = transport
        self.written = 0

    def write(self, data) -> None:
        self.written += len(data)
        self._transport.write(data)

    def __getattr__(self, name):
        return getattr(self._transport, name)


_SO_NWRITE = 0x1024  # macOS: bytes in a socket's send buffer not yet acknowledged


def unsent_bytes(transport) -> int:
    """Bytes the kernel holds for the peer that it has not acknowledged (0 where the kernel cannot say)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        if sys.platform.startswith("linux"):
            import fcntl
            import termios

            return int.from_bytes(fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"), sys.byteorder,
                                  signed=True)
        if sys.platform == "darwin":
            return sock.getsockopt(socket.SOL_SOCKET, _SO_NWRITE)
    except (OSError, ValueError):
        pass
    return 0


async def _too_many_connections(scope, receive, send) -> None:
    error = busy_error("This server has too many open connections; try again in a moment.", "too_many_connections",
                       close=True)
    await error.response(scope.get("path", ""))(scope, receive, send)


class RequestQueue:
    """ASGI middleware: at most `slots + max_queue` generation requests in the server at once; beyond
    that a 503 with Retry-After, before the body is read."""

    def __init__(self, app, slots: int, max_queue: int):
        self.app, self.limit, self.max_queue = app, max(1, slots) + max(0, max_queue), max_queue
        self.in_flight = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in QUEUED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            error = busy_error(f"This server is answering and queueing as many requests as it takes "
                               f"({self.max_queue} waiting); try again in a moment.", "queue_full")
            await error.response(scope["path"])(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class MemoryBudget:
    """Bytes that the requests being handled may hold together; taken in the order asked (first come, first
    served: a big request is not starved by a stream of small ones). Used on the server's event loop only."""

    def __init__(self, total: int):
        self.total = self.free = total
        self._queue: deque[tuple[int, asyncio.Future]] = deque()

    async def take(self, size: int, gone: Callable[[], Awaitable[bool]]) -> "HeldBytes | None":
        """Hold `size` bytes (at most the whole budget) once they are free; None when gone() says the client
        left meanwhile."""
        size = min(max(size, 0), self.total)
        turn = asyncio.get_running_loop().create_future()
        entry = (size, turn)
        self._queue.append(entry)
        self._grant()
        held = None
        try:
            while not turn.done():
                try:
                    await asyncio.wait_for(asyncio.shield(turn), WAIT_CHECK_S)
                except asyncio.TimeoutError:
                    if await gone():
                        return None
            held = HeldBytes(self, size)
            return held
        finally:
            if not turn.done():  # gave up waiting (the client left, the task was cancelled)
                self._queue.remove(entry)
                self._grant()  # the ones behind it may fit now
            elif held is None:
                self._give(size)  # granted just as it gave up

    def _grant(self) -> None:
        while self._queue and self._queue[0][0] <= self.free:
            size, turn = self._queue.popleft()
            self.free -= size
            turn.set_result(None)

    def _give(self, size: int) -> None:
        self.free += size
        self._grant()


class HeldBytes:
    def __init__(self, budget: MemoryBudget, size: int):
        self.budget, self.size = budget, size

    def close(self) -> None:
        """Give the bytes back; any number of times."""
        size, self.size = self.size, 0
        if size:
            self.budget._give(size)
