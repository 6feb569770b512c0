"""What every request must be before the API reads it: addressed to this server, JSON, and of bounded size.

Without a key, the default on loopback, the API trusts whoever can reach it, and a web page the user visits
can reach 127.0.0.1 too:
- a "simple" cross-origin POST (Content-Type text/plain, form data) needs no CORS preflight, so a page could
  make the model generate (confirmed with headless Chromium against an unguarded `hearth serve`);
- DNS rebinding points the page's own host name at 127.0.0.1, so it could also read the answers.

So a body must say `application/json` (which a page cannot send cross-origin without a preflight, and the
preflight fails while CORS is closed), and the Host header must name this server: on loopback without a key,
only localhost, 127.0.0.1 and [::1] (any port) and the names given with --allowed-host. With a key, or bound
beyond loopback, the key protects the server and any Host is taken unless --allowed-host names some. This is
the class of Ollama's DNS-rebinding advisory.

A body is read here, up to the limit, before the application sees it: a 20 MB body is a 413 after
`max_body_bytes`, not parsed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time

from app.server.edge.errors import ApiError
from app.server.edge.limits import Limits

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    if host.casefold() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_problem(key: str | None) -> str | None:
    """Why a server key could never be sent by a client, or None for a usable key (or none at all).
    Clients send it in a header, which cannot hold a blank key, spaces at its ends (stripped on the way) or
    characters outside printable ASCII: a server with such a key listens where nobody can use it."""
    if key is None:
        return None
    if not key.strip():
        return "The API key is blank (empty or only spaces), which no client can send; give a real key."
    if key != key.strip() or not all(" " <= c <= "~" for c in key):
        return ("The API key has spaces at its start or end or characters other than printable ASCII, which no "
                "client can send in a header; give a key of letters, digits and punctuation.")
    return None


def allowed_hosts(bind_host: str, api_key: str | None, extra: list[str] | tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The Host names the server answers to; None for any (a key protects it, or it serves a network)."""
    if extra:
        return tuple(LOOPBACK_NAMES) + tuple(h.casefold() for h in extra)
    if api_key or not is_loopback(bind_host):
        return None
    return LOOPBACK_NAMES


def host_name(value: str) -> str:
    """The name in a Host header, without its port: 'localhost:8080' -> 'localhost', '[::1]:80' -> '::1'."""
    value = value.strip()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class RequestGuard:
    """ASGI middleware: refuses a foreign Host (403), a body that is not JSON (415), one too big (413) and
    one that does not arrive within body_timeout_s (408)."""

    def __init__(self, app, hosts: tuple[str, ...] | None, max_body_bytes: int = Limits.max_body_bytes,
                 body_timeout_s: float = Limits.body_timeout_s):
        self.app, self.hosts, self.max_body_bytes = app, hosts, max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        error = self._header_error(scope, headers)
        if error is None and scope["method"] in ("POST", "PUT", "PATCH"):
            body, error = await self._read_body(receive, headers)
            if error is None:
                receive = _replay(body, receive)
        if error is not None:
            await error.response(scope["path"])(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _header_error(self, scope, headers: dict) -> ApiError | None:
        if self.hosts is not None:
            name = host_name(headers.get(b"host", b"").decode("latin-1")).casefold().rstrip(".")
            if name not in self.hosts and not (name.startswith("127.") and is_loopback(name)):
                return ApiError(403, f"This server answers only requests addressed to "
                                     f"{', '.join(self.hosts)} (the Host header said '{name or 'nothing'}'); "
                                     "start it with --allowed-host NAME to add a name.", "permission_error",
                                code="host_not_allowed")
        if scope["method"] in ("POST", "PUT", "PATCH"):
            kind = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().casefold()
            if kind != "application/json":
                return ApiError(415, f"Send the request body as JSON, with 'Content-Type: application/json' "
                                     f"(it said '{kind or 'nothing'}').", code="unsupported_media_type")
            length = headers.get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                return self._too_big()
        return None

    def _too_big(self) -> ApiError:
        return ApiError(413, f"The request body is larger than this server takes ({self.max_body_bytes / 2**20:g} MB).",
                        code="request_too_large")

    async def _read_body(self, receive, headers) -> tuple[bytes, ApiError | None]:
        chunks, size = [], 0
        deadline = time.monotonic() + self.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0))
            except asyncio.TimeoutError:
                return b"", ApiError(408, f"The request body did not arrive within {self.body_timeout_s:g} s.",
                                     code="request_timeout", headers={"Connection": "close"})
            if message["type"] == "http.disconnect":
                return b"", ApiError(400, "The client went away before its request was read.")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return b"", self._too_big()
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks), None


def _replay(body: bytes, receive):
    """A receive() that gives the application the body already read, then waits on the real one (for the
    client's disconnect, which a streaming answer listens for)."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
