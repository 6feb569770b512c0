"""The OpenAI-compatible endpoints: /v1/models, /v1/chat/completions, /v1/completions, and /health.

A Starlette app over one backend (app/engine/backend.py); uvicorn serves it (app/server/run.py).
Responses follow OpenAI's shapes, streaming as server-sent events with a last usage chunk when
`stream_options.include_usage` asks for it. An error is the OpenAI envelope with its status; a
request whose engine error comes before its first token gets that status even when streaming.
"""

from __future__ import annotations

import contextvars
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.errors import HearthError
from app.engine import protocol as P
from app.engine.backend import Backend
from app.server.errors import ApiError, from_engine, invalid
from app.server.requests import Generation, chat_request, completion_request
from app.server.streams import EngineStream

DEFAULT_MAX_TOKENS = 2048
# Our finish reasons as OpenAI's: an answer the context cut short ran out of room, as "length" says.
FINISH = {"stop": "stop", "length": "length", "context_full": "length", "cancelled": "stop"}


@dataclass
class RequestRecord:
    """One finished HTTP request, for a request log (the window's Server page)."""

    started: float  # time.time() when it came in
    method: str
    path: str
    status: int  # 499: the client left before an answer; 500: the handler raised
    prompt_tokens: int | None = None  # None: the request generated nothing (a model list, an error)
    completion_tokens: int | None = None
    duration_s: float = 0.0


# The record of the request being handled: set per request by OpenAIApi.__call__ (an asyncio task and
# its children see it), filled from the engine's Done event on whichever thread delivers it.
_RECORD: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar("hearth_request_record",
                                                                               default=None)


def model_id(info: dict | None) -> str | None:
    """The name clients use for the loaded model: its file name without .gguf."""
    return Path(info["path"]).stem if info and info.get("path") else None


class OpenAIApi:
    def __init__(self, backend: Backend, api_key: str | None = None, cors: list[str] | None = None,
                 default_max_tokens: int = DEFAULT_MAX_TOKENS,
                 on_request: Callable[[RequestRecord], None] | None = None):
        """on_request, if given, is called once per finished HTTP request, on the server's thread."""
        self.backend = backend
        self.on_request = on_request
        self.api_key = api_key
        self.default_max_tokens = default_max_tokens
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
        ]
        middleware = []
        if cors:
            middleware.append(Middleware(CORSMiddleware, allow_origins=cors, allow_methods=["GET", "POST", "OPTIONS"],
                                         allow_headers=["*"]))
        self.app = Starlette(routes=routes, middleware=middleware,
                             exception_handlers={ApiError: self._api_error, 404: self._not_found,
                                                 405: self._not_allowed, Exception: self._internal})
        self.app.router.redirect_slashes = False

    # --- plumbing --------------------------------------------------------
    async def __call__(self, scope, receive, send):
        if self.on_request is None or scope["type"] != "http":
            await self._handle(scope, receive, send)
            return
        record = RequestRecord(time.time(), scope["method"], scope["path"], 499)
        token = _RECORD.set(record)
        t0 = time.perf_counter()

        async def noting_status(message):
            if message["type"] == "http.response.start":
                record.status = message["status"]
            await send(message)

        try:
            await self._handle(scope, receive, noting_status)
        except Exception:
            record.status = 500
            raise
        finally:
            _RECORD.reset(token)
            record.duration_s = time.perf_counter() - t0
            self.on_request(record)

    async def _handle(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/") and scope["method"] != "OPTIONS":
            error = self._auth_error(scope)
            if error is not None:
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _auth_error(self, scope) -> ApiError | None:
        if not self.api_key:
            return None
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"").decode("latin-1")
        token = given[7:].strip() if given.lower().startswith("bearer ") else ""
        if not token:
            return ApiError(401, "This server needs an API key: send it as 'Authorization: Bearer KEY'.",
                            code="invalid_api_key")
        if not secrets.compare_digest(token.encode(), self.api_key.encode()):
            return ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
        return None

    async def _api_error(self, request: Request, exc: ApiError) -> Response:
        return exc.response()

    async def _not_found(self, request: Request, exc) -> Response:
        return ApiError(404, f"There is no endpoint {request.method} {request.url.path}.", code="not_found").response()

    async def _not_allowed(self, request: Request, exc) -> Response:
        return ApiError(405, f"{request.url.path} does not take {request.method} requests.").response()

    async def _internal(self, request: Request, exc: Exception) -> Response:
        from app.core.crashlog import write_crash_log

        try:
            log = f" Details are in {write_crash_log(exc)}."
        except OSError:
            log = ""
        return ApiError(500, f"Internal server error ({type(exc).__name__}).{log}", "server_error").response()

    @staticmethod
    async def _json(request: Request):
        raw = await request.body()
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise invalid("The request body is not valid UTF-8.") from None
        except RecursionError:
            raise invalid("The request body is nested too deeply.") from None
        except ValueError as exc:
            raise invalid(f"The request body is not valid JSON: {exc}.") from None

    def _serving(self, requested: str | None) -> str:
        """The loaded model's id, if the request may use it: 503 while none is ready, 404 for another."""
        info = self.backend.info
        current = model_id(info)
        if current is None or not self.backend.ready:
            raise ApiError(503, "The model is loading; try again in a moment.", "unavailable_error",
                           code="model_loading")
        if requested and requested not in (current, Path(info["path"]).name, info["path"]):
            raise ApiError(404, f"The model '{requested}' does not exist here; this server has '{current}'.",
                           param="model", code="model_not_found")
        return current

    def _start(self, start) -> EngineStream:
        record = _RECORD.get()
        if record is not None:
            start = _counting(start, record)
        try:
            return EngineStream(self.backend, start)
        except HearthError as exc:
            raise from_engine(P.ErrorKind.of(exc), str(exc)) from None

    # --- endpoints -------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if self.backend.ready:
            return JSONResponse({"status": "ok", "model": model_id(self.backend.info), "busy": self.backend.busy})
        return ApiError(503, "The model is loading.", "unavailable_error", code="model_loading").response()

    async def models(self, request: Request) -> Response:
        info = self.backend.info
        data = []
        if model_id(info):
            created = int(Path(info["path"]).stat().st_mtime) if Path(info["path"]).exists() else 0
            data.append({"id": model_id(info), "object": "model", "created": created, "owned_by": "hearth",
                         "meta": {"n_ctx": info.get("n_ctx"), "n_ctx_train": info.get("n_ctx_train"),
                                  "n_params": info.get("n_params"), "size": info.get("size_bytes")}})
        return JSONResponse({"object": "list", "data": data})

    async def chat_completions(self, request: Request) -> Response:
        gen = chat_request(await self._json(request), self.default_max_tokens)
        model = self._serving(gen.model)
        stream = self._start(lambda sink: self.backend.chat(gen.messages, gen.sampling, sink, truncate=False))
        return await self._respond(request, stream, gen, model, chat=True)

    async def completions(self, request: Request) -> Response:
        gen = completion_request(await self._json(request), self.default_max_tokens)
        model = self._serving(gen.model)
        stream = self._start(lambda sink: self.backend.complete(gen.prompt, gen.sampling, sink, truncate=False))
        return await self._respond(request, stream, gen, model, chat=False)

    # --- answers ---------------------------------------------------------
    async def _respond(self, request: Request, stream: EngineStream, gen: Generation, model: str,
                       chat: bool) -> Response:
        stream.disconnected = request.is_disconnected
        events = stream.events()
        first = await anext(events, None)
        if first is None:  # the client left before anything came
            return Response(status_code=499)
        if isinstance(first, P.Failed):
            raise from_engine(first.kind, first.message)
        shape = _Shape(model, chat, gen)
        if gen.stream:
            stream.disconnected = None
            return StreamingResponse(shape.sse(first, events), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        text, done = [gen.prompt] if gen.echo else [], None
        async for event in _chain(first, events):
            if isinstance(event, P.Token):
                text.append(event.text)
            elif isinstance(event, P.Done):
                done = event
            elif isinstance(event, P.Failed):
                raise from_engine(event.kind, event.message)
        if done is None:
            return Response(status_code=499)
        return JSONResponse(shape.whole("".join(text), done))


def _counting(start, record: RequestRecord):
    """start, with a sink that notes the answer's token counts in record."""
    def counted(sink):
        def note(event: P.Event) -> None:
            if isinstance(event, P.Done):
                record.prompt_tokens = event.get("prompt_tokens")
                record.completion_tokens = event.get("completion_tokens")
            sink(event)
        return start(note)
    return counted


async def _chain(first: P.Event, rest: AsyncIterator[P.Event]) -> AsyncIterator[P.Event]:
    yield first
    async for event in rest:
        yield event


class _Shape:
    """OpenAI's response objects for one request."""

    def __init__(self, model: str, chat: bool, gen: Generation):
        self.model, self.chat, self.gen = model, chat, gen
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    @staticmethod
    def usage(done: P.Done) -> dict:
        # A backend that cannot count (a remote server that sent no usage) says None: count it as 0.
        prompt, completion = int(done.get("prompt_tokens") or 0), int(done.get("completion_tokens") or 0)
        evaluated = done.get("prompt_evaluated")
        cached = max(prompt - int(evaluated), 0) if evaluated is not None else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def whole(self, text: str, done: P.Done) -> dict:
        reason = FINISH.get(done.get("finish_reason"), "stop")
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                      "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        return {**self._head(self.object), "choices": [choice], "usage": self.usage(done)}

    def _chunk(self, text: str | None, reason: str | None, first: bool = False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": text or ""} if first else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        return {**self._head("text_completion"),
                "choices": [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}]}

    async def sse(self, first: P.Event, events: AsyncIterator[P.Event]) -> AsyncIterator[bytes]:
        if self.chat:
            yield _sse(self._chunk("", None, first=True))
        elif self.gen.echo:
            yield _sse(self._chunk(self.gen.prompt, None))
        async for event in _chain(first, events):
            if isinstance(event, P.Token):
                yield _sse(self._chunk(event.text, None))
            elif isinstance(event, P.Done):
                yield _sse(self._chunk(None, FINISH.get(event.get("finish_reason"), "stop")))
                if self.gen.include_usage:
                    yield _sse({**self._head(self._chunk(None, None)["object"]), "choices": [],
                                "usage": self.usage(event)})
            elif isinstance(event, P.Failed):  # after the first token: the status is sent already
                yield _sse(from_engine(event.kind, event.message).body())
        yield b"data: [DONE]\n\n"


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"
