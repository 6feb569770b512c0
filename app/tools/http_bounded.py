"""How Hearth reads what an MCP server over HTTP answers: each JSON answer bounded, as a stdio line is.

The SDK's streamable-HTTP client reads a JSON answer whole (`response.aread()`), however large: a server could
grow Hearth's memory without bound with one tool result (a streamed answer is bounded already, 1 MB an event, by
the SDK). Hearth gives it an HTTP client whose transport counts the bytes of a JSON answer as they arrive and
stops at MAX_MESSAGE_BYTES, the bound of a stdio message (app/tools/stdio_lines.py): the SDK turns the stream's
error into an error answer to that call (its _handle_json_response catches StreamError), which Hearth says
without the SDK's words around it; the connection goes on.
"""

from __future__ import annotations

import httpx2

from app.tools.stdio_lines import MAX_MESSAGE_BYTES, too_long

SDK_PREFIX = "Failed to parse JSON response: "  # what the SDK puts before the stream's error


class AnswerTooLarge(httpx2.StreamError):
    """A JSON answer past MAX_MESSAGE_BYTES: the phrase the call's error ends with."""


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, length: int | None):
        self._stream, self._length = stream, length

    async def __aiter__(self):
        if self._length is not None and self._length > MAX_MESSAGE_BYTES:  # said by its header: nothing read
            raise AnswerTooLarge(too_long(self._length))
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > MAX_MESSAGE_BYTES:
                raise AnswerTooLarge(too_long(None))
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class BoundedTransport(httpx2.AsyncHTTPTransport):
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        if response.headers.get("content-type", "").startswith("application/json"):
            length = response.headers.get("content-length")
            response.stream = _Bounded(response.stream, int(length) if length and length.isdigit() else None)
        return response


def bounded_client(headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    """The SDK's HTTP client (create_mcp_http_client: its timeouts, no redirects) with the bounded transport."""
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    return httpx2.AsyncClient(timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
                              headers=headers, transport=BoundedTransport())


def plain_reason(text: str) -> str:
    """A call's error as Hearth says it: a bounded answer's phrase without the SDK's words before it."""
    return text.removeprefix(SDK_PREFIX) if text.startswith(SDK_PREFIX + "its answer was") else text
