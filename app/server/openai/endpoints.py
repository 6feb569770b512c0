"""The API server: OpenAI's /v1/models, /v1/chat/completions, /v1/completions and /v1/embeddings, its Responses
API (/v1/responses, app/server/responses/endpoints.py), Anthropic's /v1/messages (app/server/anthropic/messages.py), and
/health.

A Starlette app over the backends of a model pool (app/server/models.py); uvicorn serves it (app/server/run.py).
Responses follow OpenAI's shapes, streaming as server-sent events with a last usage chunk when
`stream_options.include_usage` asks for it; tool calls come back as `tool_calls` (app/server/tools.py).
A reasoning model's <think>…</think> comes back as `reasoning_content`, as llama-server returns it, unless
the request's `reasoning_format` (or the server's) is "none" (app/core/chats/reasoning.py splits it).
An error is the dialect's envelope with its status; a request whose engine error comes before its first
token gets that status even when streaming.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import AsyncIterator, Callable

import numpy as np
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.core.errors import HearthError
from app.server.responses.store import ResponseStore
from app.core.chats.reasoning import ReasoningSplitter
from app.server.edge import field_policy
from app.server.ollama.endpoints import routes as ollama_routes
from app.protocol import messages as P
from app.server.options import request_defaults
from app.backends.backend import Backend
from app.server.anthropic.messages import AnthropicMessages
from app.server.openai.chat_mcp import ChatWithMcp, names_mcp
from app.server.answers import (TextFrame, chat_usage, event_stream, finish_reason, limit_cut, open_answer, respond,
                                sse_data, stream_parts, whole_answer, whole_parts)
from app.server.edge.errors import ApiError, from_engine, invalid
from app.server.edge.guard import RequestGuard, allowed_hosts
from app.server.edge.limits import Limits, RequestQueue
from app.server.media_parts import modalities, refuse_unless_takes
from app.server.models import ModelPool, model_id
from app.server.edge.request_body import parse_body
from app.server.openai.chat_request import Generation, chat_request, completion_request, embedding_request
from app.server.responses.endpoints import ResponsesApi
from app.server.edge.streams import EngineStream, request_scope
from app.server.tools import CallReader

# The endpoints also answered without their /v1 prefix (llama-server does; a base URL set without it then works).
WITHOUT_V1 = {"/models", "/chat", "/completions", "/embeddings", "/messages", "/responses"}
# Requests that may wait for a model at once (most wait for a load under way); more queue for a thread.
ACQUIRE_THREADS = 16


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


class OpenAIApi:
    def __init__(self, models: ModelPool | Backend, api_key: str | None = None, cors: list[str] | None = None,
                 defaults: P.SamplingOptions | None = None,
                 on_request: Callable[[RequestRecord], None] | None = None,
                 hosts: tuple[str, ...] | None | str = "loopback", limits: Limits = Limits(), slots: int = 1,
                 reasoning_format: str = "auto", response_store: ResponseStore | None = None, api_tools=None,
                 strict_fields: bool = False, strict_models: bool = False):
        """models: the pool of models to serve (app/server/models.py), or one backend to serve alone.
        on_request, if given, is called once per finished HTTP request, on the server's thread.
        hosts: the Host names answered (None: any; app/server/edge/guard.py decides from the address and key);
        "loopback": as for a server bound to loopback with this key.
        limits: the body's size and deadline and the queue (app/server/edge/limits.py; the head deadline and the
        connection cap are uvicorn's protocol's, limits.http_protocol); slots: requests the model answers at once.
        reasoning_format: "auto" returns a reasoning model's thinking as `reasoning_content`, "none" leaves it in
        `content`; a request's own `reasoning_format` wins. response_store: where /v1/responses keeps responses
        (None: the data folder's, opened on the first request that needs it). api_tools: the MCP servers offered
        to API clients (app/server/api_tools.py; None: none)."""
        self.reasoning_format = reasoning_format
        # A field Hearth does not know: left out and named in a header, or with strict_fields a 400
        # (app/server/edge/field_policy.py). strict_models: OpenAI's fixed model names are a 404, as any unknown name.
        self.strict_fields, self.strict_models = strict_fields, strict_models
        self.pool = models if isinstance(models, ModelPool) else ModelPool(models)
        # Acquiring a model (a load may take seconds) has threads of its own: no other work on the default
        # executor (six hung MCP calls took all of it once) may keep a plain request from its model.
        self._acquiring = ThreadPoolExecutor(ACQUIRE_THREADS, thread_name_prefix="hearth-acquire")
        self.on_request = on_request
        self.api_key = api_key
        self.defaults = defaults or request_defaults()  # what a request leaves out (app/server/options.py)
        messages = AnthropicMessages(self)
        responses = ResponsesApi(self, response_store, api_tools)
        self.chat_with_mcp = ChatWithMcp(responses)
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", self.model, methods=["GET"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/embeddings", self.embeddings, methods=["POST"]),
            Route("/v1/messages", messages.create, methods=["POST"]),
            Route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"]),
            Route("/v1/responses", responses.create, methods=["POST"]),
            Route("/v1/responses/{response_id}", responses.retrieve, methods=["GET"]),
            Route("/v1/responses/{response_id}", responses.delete, methods=["DELETE"]),
            Route("/v1/responses/{response_id}/input_items", responses.input_items, methods=["GET"]),
            *ollama_routes(self),  # Ollama's API beside them (app/server/ollama/endpoints.py)
        ]
        middleware = []
        if cors:
            middleware.append(Middleware(CORSMiddleware, allow_origins=cors, allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                                         allow_headers=["*"]))
        self.app = Starlette(routes=routes, middleware=middleware,
                             exception_handlers={ApiError: self._api_error, 404: self._not_found,
                                                 405: self._not_allowed, Exception: self._internal})
        self.app.router.redirect_slashes = False
        if hosts == "loopback":
            hosts = allowed_hosts("127.0.0.1", api_key)
        self._guarded = RequestQueue(RequestGuard(self._handle_checked, hosts, limits.max_body_bytes,
                                                  limits.body_timeout_s),
                                     slots * self.pool.max_models, limits.max_queue)

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
        if scope["type"] != "http":
            await self._guarded(scope, receive, send)
            return
        with request_scope():  # the engine requests this request started end with it, however it ends
            with field_policy.request_fields(self.strict_fields, scope["path"]) as notes:
                async def noted(message):  # the fields left out, the model that answered, in headers (field_policy)
                    if message["type"] == "http.response.start" and notes.headers():
                        message = {**message, "headers": [*message.get("headers", []), *notes.headers()]}
                    await send(message)

                await self._guarded(scope, receive, noted)

    async def _handle_checked(self, scope, receive, send):
        if scope["type"] == "http" and "/" + scope["path"].split("/")[1] in WITHOUT_V1:
            # A client whose base URL was set without /v1 (#54.7): the same endpoint, as llama-server answers it.
            scope = {**scope, "path": "/v1" + scope["path"],
                     "raw_path": b"/v1" + (scope.get("raw_path") or scope["path"].encode())}
        # As /health, Ollama's "/" and /api/version say only that a server is there; everything else needs the key.
        if scope["type"] == "http" and scope["path"].startswith(("/v1/", "/api/")) and scope["method"] != "OPTIONS" \
                and scope["path"] != "/api/version":
            error = self._auth_error(scope)
            if error is not None:
                shaped = error.response(scope["path"])
                await shaped(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _auth_error(self, scope) -> ApiError | None:
        if not self.api_key:
            return None
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"").decode("latin-1")
        # OpenAI's clients send a bearer token, Anthropic's an x-api-key header.
        token = given[7:].strip() if given.lower().startswith("bearer ") else ""
        token = token or headers.get(b"x-api-key", b"").decode("latin-1").strip()
        if not token:
            return ApiError(401, "This server needs an API key: send it as 'Authorization: Bearer KEY' "
                            "or 'x-api-key: KEY'.", code="invalid_api_key")
        if not secrets.compare_digest(token.encode(), self.api_key.encode()):
            return ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
        return None

    async def _api_error(self, request: Request, exc: ApiError) -> Response:
        return exc.response(request.url.path)

    async def _not_found(self, request: Request, exc) -> Response:
        return ApiError(404, f"There is no endpoint {request.method} {request.url.path}.",
                        code="not_found").response(request.url.path)

    async def _not_allowed(self, request: Request, exc) -> Response:
        return ApiError(405, f"{request.url.path} does not take {request.method} requests.").response(
            request.url.path)

    async def _internal(self, request: Request, exc: Exception) -> Response:
        from app.core.store.crashlog import write_crash_log

        try:
            log = f" Details are in {write_crash_log(exc)}."
        except OSError:
            log = ""
        return ApiError(500, f"Internal server error ({type(exc).__name__}).{log}",
                        "server_error").response(request.url.path)

    @staticmethod
    async def body_of(request: Request):
        """The request's JSON body, every string in it checked (app/server/edge/request_body.py); 400 for one that is not
        UTF-8, not JSON, or holds a string that is not text."""
        return parse_body(await request.body())

    def thinking(self, gen: Generation, backend: Backend) -> bool | None:
        """How a reasoning model's thinking is split off the answer: None leaves it in the text (reasoning_format
        "none", the request's own or the server's); else whether the template opened <think> already."""
        if (gen.reasoning_format or self.reasoning_format) == "none":
            return None
        return bool((backend.info or {}).get("opens_thinking"))

    def close(self) -> None:
        """The server stopped: the threads that acquired models for it end with it (the window's Server page starts
        and stops a server many times in one process; each left a thread behind)."""
        self._acquiring.shutdown(wait=True, cancel_futures=True)

    async def serving(self, requested: str | None) -> tuple[str, Backend]:
        """The id and backend of the model a request names (loaded on demand, which takes seconds: off the
        event loop); 503 while none is ready, 404 for a model this server cannot have."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._acquiring, self.pool.acquire, requested)
        except ApiError as exc:
            # OpenAI's and Anthropic's own names, which some clients cannot change: the loaded model answers, and
            # the response's model field and Hearth-Model header say which (--strict-models keeps the 404).
            if exc.status != 404 or self.strict_models or not field_policy.fixed_model_name(requested):
                raise
        model, backend = await loop.run_in_executor(self._acquiring, self.pool.acquire, None)
        field_policy.note_model(requested, model)
        return model, backend

    @staticmethod
    def start(backend: Backend, start, again: bool = False, resumable: bool = False) -> EngineStream:
        """again: the request has no grammar, so it cannot be what stalls a step: where the watchdog ends the
        engine before its first event, it is sent again (app/server/edge/streams.py); resumable: start takes the
        answer so far to go on from (chat_stream, completion_stream)."""
        record = _RECORD.get()
        if record is not None:
            start = _counting(start, record)
        try:
            return EngineStream(backend, start, again, resumable)
        except HearthError as exc:
            raise from_engine(P.ErrorKind.of(exc), str(exc)) from None

    def chat_stream(self, backend: Backend, messages: list[dict], sampling, tools: list[dict] | None = None,
                    truncate: bool = False) -> EngineStream:
        """A chat request's stream. One without a grammar may go on from the text its client already has, where the
        watchdog ended the engine under it for another slot's stalled step (app/server/answers.py): the answer so
        far becomes the start of the assistant's turn (a prefill, which the engine continues), with what is left
        of its token budget."""
        def start(sink, so_far: str = "", used: int = 0) -> int:
            if not so_far:
                return backend.chat(messages, sampling, sink, truncate=truncate, tools=tools)
            last = messages[-1] if messages else {}
            if last.get("role") == "assistant" and isinstance(last.get("content"), str):  # a prefill already
                going_on = [*messages[:-1], {**last, "content": last["content"] + so_far}]
            else:
                going_on = [*messages, {"role": "assistant", "content": so_far}]
            return backend.chat(going_on, _budget_left(sampling, used), sink, truncate=truncate, tools=tools)

        return self.start(backend, start, again=not sampling.grammar, resumable=True)

    def completion_stream(self, backend: Backend, prompt: str, sampling) -> EngineStream:
        """A completion's stream, which may go on as chat_stream's does: the prompt followed by the answer so far."""
        def start(sink, so_far: str = "", used: int = 0) -> int:
            return backend.complete(prompt + so_far, _budget_left(sampling, used) if so_far else sampling, sink,
                                    truncate=False)

        return self.start(backend, start, again=not sampling.grammar, resumable=True)

    # --- endpoints -------------------------------------------------------
    async def health(self, request: Request) -> Response:
        """200 when a request would be answered, 503 while the model loads. Without the key (on a server that
        has one) only that: a health check needs no more, and which model runs and when it is busy are the
        key holder's to know. With the key, or on a server without one, also the model and whether it is busy."""
        loaded = self.pool.loaded()
        stalled = next((s for s in (b.stalled for b in loaded) if s), None)
        if stalled:  # an engine step past its budget (the supervisor's watchdog): nothing is answered now
            return ApiError(503, stalled, "unavailable_error", code="engine_stalled").response()
        ready = [b for b in loaded if b.ready]
        failed = next((b for b in loaded if self.pool.failed(b)), None)
        if not ready and failed is not None:  # not loading: its load failed, and the next request tries again
            return ApiError(503, f"The model could not be loaded: {failed.load_error or 'see the server log'} The "
                                 "next request tries again.", "unavailable_error", code="model_load_failed").response()
        if ready or (not loaded and self.pool.load_options is not None):  # none loaded: the next request loads
            if self.api_key and self._auth_error(request.scope) is not None:
                return JSONResponse({"status": "ok"})
            return JSONResponse({"status": "ok", "model": self.pool.id_of(ready[0]) if ready else None,
                                 "busy": any(b.busy for b in loaded)})
        return ApiError(503, "The model is loading.", "unavailable_error", code="model_loading").response()

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": await self._model_list()})

    async def model(self, request: Request) -> Response:
        """GET /v1/models/{id} (the OpenAI client's models.retrieve): one entry of the list, by its exact id."""
        wanted = request.path_params["model_id"]
        for entry in await self._model_list():
            if entry["id"] == wanted:
                return JSONResponse(entry)
        raise ApiError(404, f"The model '{wanted}' does not exist here; GET /v1/models lists the ids.", param="model",
                       code="model_not_found")

    async def _model_list(self) -> list[dict]:
        catalog = await asyncio.get_running_loop().run_in_executor(None, self.pool.catalog)
        loaded = {os.path.realpath(b.info["path"]): b.info for b in self.pool.loaded() if model_id(b.info)}
        data = []
        for entry in catalog:
            info = loaded.get(os.path.realpath(entry.path))
            if info is not None:
                data.append(_model_entry(entry, {
                    "n_ctx": info.get("n_ctx"), "n_ctx_train": info.get("n_ctx_train"),
                    "n_params": info.get("n_params"), "size": info.get("size_bytes"), "loaded": True,
                    "modalities": modalities(info, entry.abilities)}))
            elif entry.error is None:  # the library's other models load on demand
                data.append(_model_entry(entry, {"n_ctx": None, "n_ctx_train": entry.context_length,
                                                 "n_params": entry.parameters, "size": entry.size_bytes,
                                                 "loaded": False, "modalities": modalities(None, entry.abilities)}))
        data.sort(key=lambda m: not m["meta"]["loaded"])  # the loaded models first, as before
        return data

    async def chat_completions(self, request: Request) -> Response:
        body = await self.body_of(request)
        if names_mcp(body):  # Hearth's MCP tools, where its user offers them here too (app/server/openai/chat_mcp.py)
            return await self.chat_with_mcp(request, body)
        gen = chat_request(body, self.defaults)
        model, backend = await self.serving(gen.model)
        refuse_unless_takes(gen.messages, model, backend.info)
        tools = gen.tools.tools if gen.tools else None
        stream = self.chat_stream(backend, gen.messages, gen.sampling, tools)
        return await self._respond(request, stream, gen, model, chat=True, thinking=self.thinking(gen, backend))

    async def completions(self, request: Request) -> Response:
        gen = completion_request(await self.body_of(request), self.defaults)
        model, backend = await self.serving(gen.model)
        stream = self.completion_stream(backend, gen.prompt, gen.sampling)
        return await self._respond(request, stream, gen, model, chat=False)

    async def embeddings(self, request: Request) -> Response:
        wanted = embedding_request(await self.body_of(request))
        model, backend = await self.serving(wanted.model)
        if model != wanted.model and field_policy.fixed_model_name(wanted.model) \
                and any(not isinstance(item, str) for item in wanted.inputs):
            # Token ids sent for OpenAI's own embedding model are its tokenizer's (tiktoken's: LangChain's
            # OpenAIEmbeddings() sends them): another model reads them as other words, or not at all.
            raise invalid(f"'input' holds token ids of OpenAI's tokenizer for '{wanted.model}', which {model} "
                          "cannot read; send the text instead (LangChain: OpenAIEmbeddings("
                          "check_embedding_ctx_length=False)).", "input")
        stream = self.start(backend, lambda sink: backend.embed(wanted.inputs, sink), again=True)
        events = await open_answer(request, stream, streaming=False)
        done = (await whole_answer(events))[1] if events is not None else None
        if done is None:
            return Response(status_code=499)
        data = [{"object": "embedding", "index": i, "embedding": _encoded(vector, wanted.encoding_format)}
                for i, vector in enumerate(done["embeddings"])]
        n = int(done.get("prompt_tokens") or 0)
        return JSONResponse({"object": "list", "data": data, "model": model,
                             "usage": {"prompt_tokens": n, "total_tokens": n}})

    # --- answers ---------------------------------------------------------
    async def _respond(self, request: Request, stream: EngineStream, gen: Generation, model: str,
                       chat: bool, thinking: bool | None = None) -> Response:
        """thinking: None keeps a reasoning model's thinking in the text; True/False split it off, the answer
        starting inside it or not."""
        shape = _Shape(model, chat, gen, thinking)
        return await respond(request, stream, gen.stream,
                             lambda text, done: shape.whole(gen.prompt + text if gen.echo else text, done),
                             lambda events: event_stream(shape.sse(events)))


def _counting(start, record: RequestRecord):
    """start, with a sink that notes the answer's token counts in record."""
    def counted(sink, *going_on):
        def note(event: P.Event) -> None:
            if isinstance(event, P.Done):
                record.prompt_tokens = event.get("prompt_tokens")
                record.completion_tokens = event.get("completion_tokens")
            sink(event)
        return start(note, *going_on)
    return counted


def _budget_left(sampling, used: int):
    """The sampling of an answer that goes on after `used` tokens: what is left of its max_tokens."""
    return replace(sampling, max_tokens=max(1, sampling.max_tokens - used))


def _model_entry(entry, meta: dict) -> dict:
    created = int(Path(entry.path).stat().st_mtime) if Path(entry.path).exists() else 0
    return {"id": entry.id, "object": "model", "created": created, "owned_by": "hearth", "meta": meta}


def _encoded(vector: list[float], encoding: str):
    """OpenAI's base64 encoding is the vector's little-endian float32 bytes."""
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector


class _Shape:
    """OpenAI's response objects for one request."""

    def __init__(self, model: str, chat: bool, gen: Generation, thinking: bool | None = None):
        self.model, self.chat, self.gen = model, chat, gen
        # The answer's thinking, split off as reasoning_content (None: left in content).
        self.opened = thinking
        self.thinking = ReasoningSplitter(thinking) if chat and thinking is not None else None
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        self.calls = CallReader(gen.tools.names) if chat and gen.tools else None
        # Each token's chunk from one encoded template (answers.TextFrame): the same bytes, a fraction of the work.
        slot = TextFrame.SLOT
        self._text_frame = TextFrame(self._chunk({"content": slot}) if chat else self._chunk(text=slot))
        self._reasoning_frame = (TextFrame(self._chunk({"reasoning_content": slot})) if self.thinking is not None
                                 else None)

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    def _reason(self, done: P.Done) -> str:
        return finish_reason(done, self.calls is not None and bool(self.calls.calls), limit_cut(done, self.calls))

    def whole(self, text: str, done: P.Done) -> dict:
        if self.chat:
            reasoning, text, calls = whole_parts(text, self.opened, self.calls)
            message = {"role": "assistant", "content": (text or None) if calls else text, "refusal": None}
            if reasoning:
                message["reasoning_content"] = reasoning
            if calls:
                message["tool_calls"] = [call.openai() for call in calls]
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": self._reason(done)}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self._reason(done)}
        return {**self._head(self.object), "choices": [choice], "usage": chat_usage(done)}

    def _chunk(self, delta: dict | None = None, reason: str | None = None, text: str | None = None) -> dict:
        if self.chat:
            choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": reason}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        return {**self._head("text_completion"),
                "choices": [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}]}

    def _pieces(self, text: str) -> list[bytes]:
        """The chunks one piece of the answer makes ("" at its end): its thinking, its text, and the tool calls it
        completes."""
        if not self.chat:
            return [self._text_frame(text)] if text else []
        reasoning, parts = stream_parts(self.thinking, self.calls, text)
        chunks = [self._reasoning_frame(reasoning)] if reasoning else []
        for piece, calls in parts:
            known = len(self.calls.calls) - len(calls) if calls else 0  # the calls' indexes go on from the earlier
            chunks += [self._text_frame(piece)] if piece else []
            chunks += [sse_data(self._chunk({"tool_calls": [call.openai(index=known + i)]}))
                       for i, call in enumerate(calls)]
        return chunks

    async def sse(self, events: AsyncIterator[P.Event]) -> AsyncIterator[bytes]:
        if self.chat:
            yield sse_data(self._chunk({"role": "assistant", "content": ""}))
        elif self.gen.echo:
            yield sse_data(self._chunk(text=self.gen.prompt))
        async for event in events:
            if isinstance(event, P.Token):
                for chunk in self._pieces(event.text):
                    yield chunk
            elif isinstance(event, P.Done):
                for chunk in self._pieces(""):  # text held back as a possible tool call's start
                    yield chunk
                yield sse_data(self._chunk(reason=self._reason(event)))
                if self.gen.include_usage:
                    yield sse_data({**self._head(self._chunk()["object"]), "choices": [], "usage": chat_usage(event)})
            elif isinstance(event, P.Failed):  # after the first token: the status is sent already
                yield sse_data(from_engine(event.kind, event.message).body())
        yield b"data: [DONE]\n\n"

