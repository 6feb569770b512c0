"""How Hearth reads what a stdio MCP server writes: one JSON-RPC message a line, each line bounded.

The SDK's reader (mcp.client.stdio) keeps a line, however long, in one string that it copies again with every
64 KB that arrives: a 20 MB tool result cost a call 12.8 s and the client 190 MB, a 50 MB one its whole 60 s
timeout, and a server could grow Hearth's memory without bound. It also says nothing when the server's stdout
ends (its process died while idle): the connection looked alive, its tools were listed, and the next call got
"Connection closed".

So Hearth gives the SDK its own reader in place of the text stream it wraps the server's stdout in: the same
text, handed over a whole line at a time (no copy per chunk); a line longer than MAX_MESSAGE_BYTES is read to
its end without being kept, and the call it answers gets an error that says so (the rest of the connection is
unharmed); and the end of the output tells the connection (watching), which lets its keepers start the server
again. The SDK looks the stream's class up by name when it starts a server (its stdout_reader), so install()
replaces that one name; tests/tools/test_stdio_lines.py holds the SDK to it.
"""

from __future__ import annotations

import re
from collections import deque
from contextvars import ContextVar
from typing import Protocol

# A tool result that Hearth gives a model is cut to a quarter of its context (app/tools/tool_chat.py's cut_result),
# at most 16 characters a token before it is counted: 4 MB for a million-token context. Servers built on the SDK's
# MCPServer send a tool's text twice (as content and as structuredContent), and JSON escapes some characters, so a
# message of four times that holds any result the cut could use; past it a message is refused, which bounds what a
# server can make Hearth hold for one call (a few times this, while it is parsed).
MAX_MESSAGE_BYTES = 16 * 2**20
_HEAD_BYTES = 4096  # of a line too long to keep: where its request id is, in the order the SDKs write it
_TAIL_BYTES = 512  # ... or at its end (the TypeScript SDK writes {"result": ..., "jsonrpc": "2.0", "id": 7})

_ID = rb'(-?\d+|"(?:[^"\\]|\\.)*")'
_VERSION = rb'"jsonrpc"\s*:\s*"2\.0"\s*'
# An answer whose id comes before its result: {"jsonrpc":"2.0","id":7,"result":...} (the Python SDK).
_ID_FIRST = re.compile(rb'\s*\{\s*(?:' + _VERSION + rb',\s*)?"id"\s*:\s*' + _ID + rb'\s*,\s*(?:' + _VERSION
                       + rb',\s*)?"result"\s*:')
# An answer whose result comes first, and its id at its very end (one closing brace: not a nested object's).
_RESULT_FIRST = re.compile(rb'\s*\{\s*(?:' + _VERSION + rb',\s*)?"result"\s*:')
_ID_LAST = re.compile(rb',\s*(?:' + _VERSION + rb',\s*)?"id"\s*:\s*' + _ID + rb'\s*(?:,\s*' + _VERSION
                      + rb')?\}\s*$')


class Watcher(Protocol):
    """The connection whose server this reader reads (app/tools/mcp_client.py's McpConnection)."""

    def output_ended(self) -> None:
        """The server's stdout ended: its process is gone (or no longer talks), whatever the session thinks."""

    def note(self, text: str) -> None:
        """A line for the server's log file."""


# Set by the connection's task before the SDK starts the server; the SDK's reader task inherits it.
watching: ContextVar[Watcher | None] = ContextVar("hearth_mcp_stdio_watcher", default=None)


def too_long(size: int | None) -> str:
    """Why a message was not read, as a phrase (the error the call gets ends "failed: <this>"); size None: not
    known (an answer cut off at the bound as it arrived)."""
    return (f"its answer was {f'{size:,} bytes, ' if size is not None else ''}more than the "
            f"{MAX_MESSAGE_BYTES // 2**20} MB Hearth reads of one message, so Hearth did not read it")


def _answer_id(head: bytes, tail: bytes) -> bytes | None:
    """The id of the request a too-long line answers, as JSON; None where it is not an answer Hearth can place."""
    found = _ID_FIRST.match(head)
    if found is not None:
        return found.group(1)
    if _RESULT_FIRST.match(head):
        found = _ID_LAST.search(tail)
        if found is not None:
            return found.group(1)
    return None


class BoundedLines:
    """A server's stdout as text, a whole line at a time (the SDK splits it at newlines and parses each line),
    every line at most MAX_MESSAGE_BYTES; built as the SDK builds anyio's TextReceiveStream."""

    def __init__(self, transport_stream, encoding: str = "utf-8", errors: str = "strict"):
        self.transport_stream = transport_stream
        self.encoding, self.errors = encoding, errors
        self._watcher = watching.get()
        self._ready: deque[str] = deque()
        self._line: list[bytes] = []  # the line being read, while it is within the bound
        self._size = 0  # its bytes so far
        self._head = self._tail = b""  # of a line past the bound, which is no longer kept

    def __aiter__(self) -> BoundedLines:
        return self

    async def __anext__(self) -> str:
        from anyio import EndOfStream  # the SDK's dependency: imported where the SDK is used

        while not self._ready:
            try:
                data = await self.transport_stream.receive()
            except EndOfStream:
                if self._watcher is not None:
                    self._watcher.output_ended()
                raise StopAsyncIteration from None
            self._take(data)
        return self._ready.popleft()

    async def receive(self) -> str:
        from anyio import EndOfStream

        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise EndOfStream from None

    async def aclose(self) -> None:
        await self.transport_stream.aclose()

    def _take(self, data: bytes) -> None:
        start = 0
        while True:
            end = data.find(b"\n", start)
            self._add(data[start:] if end < 0 else data[start:end])
            if end < 0:
                return
            self._end_line()
            start = end + 1

    def _add(self, piece: bytes) -> None:
        if not piece:
            return
        self._size += len(piece)
        if self._line is None:  # past the bound: only its end is kept, for the id
            self._tail = (self._tail + piece)[-_TAIL_BYTES:]
        elif self._size > MAX_MESSAGE_BYTES:
            kept = b"".join(self._line) + piece
            self._head, self._tail, self._line = kept[:_HEAD_BYTES], kept[-_TAIL_BYTES:], None
        else:
            self._line.append(piece)

    def _end_line(self) -> None:
        if self._line is not None:
            self._ready.append(b"".join(self._line).decode(self.encoding, self.errors) + "\n")
        else:
            self._refuse(self._size)
        self._line, self._size, self._head, self._tail = [], 0, b"", b""

    def _refuse(self, size: int) -> None:
        """A line past the bound: the request it answers gets an error that says why (else its caller would wait
        for its timeout); one Hearth cannot place (a notification, a request of the server's) is only logged."""
        answer_to = _answer_id(self._head, self._tail)
        if answer_to is not None:
            message = too_long(size).replace("\\", "\\\\").replace('"', '\\"')
            self._ready.append('{"jsonrpc": "2.0", "id": ' + answer_to.decode("utf-8", "replace")
                               + ', "error": {"code": -32603, "message": "' + message + '"}}\n')
        if self._watcher is not None:
            self._watcher.note(f"a message of {size:,} bytes was not read: more than the "
                               f"{MAX_MESSAGE_BYTES // 2**20} MB Hearth reads of one"
                               + ("" if answer_to is not None else " (and not an answer Hearth could place)"))


def install() -> None:
    """The SDK's stdio transport reads servers through BoundedLines from now on (idempotent)."""
    import mcp.client.stdio as sdk_stdio

    sdk_stdio.TextReceiveStream = BoundedLines
