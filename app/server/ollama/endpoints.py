"""Ollama's API, served by the same `hearth serve` (#54.3): many desktop and editor tools, and Open WebUI's Ollama
connection, speak only this API and look for it at port 11434 (`hearth serve --ollama-port 11434`).

A translator, not a second server: each request is read against its declared fields and into the OpenAI request it
means (app/server/ollama/request.py), and checked by the same readers (app/server/openai/chat_request.py), so the
same bounds, the same hostile-input behaviour and the same engine path serve it; only the shapes differ. Ollama's
names (`name:tag`) map onto library ids (`:latest` is the id itself). Errors are Ollama's `{"error": "..."}`; an
unknown model is its 404.

Endpoints: GET/HEAD /, /api/version, /api/tags, /api/ps, POST /api/show, /api/chat, /api/generate (NDJSON streams
by default, `stream: false` for one object; `options` as sampling, `format` "json" or a schema, `tools`, `think`,
`images` (base64, for a model with its projector: app/server/media_parts.py), `keep_alive` 0 to unload),
/api/embed, /api/embeddings; /api/pull (a Hugging Face name, hf.co/OWNER/REPO:QUANT) and /api/delete over the
library (app/server/ollama/library_writes.py). /api/copy, /api/create and /api/push are refused in a sentence: a
library model has one name, its file's.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.chats.reasoning import ReasoningSplitter
from app.protocol import messages as P
from app.server.answers import (compact_json, limit_cut, open_answer, respond, stream_parts, whole_answer,
                                whole_parts)
from app.server.edge.errors import ApiError, invalid
from app.server.edge.request_shape import read
from app.server.media_parts import ollama_images, refuse_unless_takes
from app.server.openai.chat_request import chat_request, completion_request, embedding_request
from app.server.ollama.library_writes import LibraryWrites
from app.server.ollama.request import (THINK_LEVELS, ChatBody, EmbedBody, EmbeddingsBody, ShowBody, openai_chat,
                                       openai_completion, read_generate, with_images)
from app.server.tools import CallReader, ToolUse

# What /api/version answers: the Ollama API this dialect follows (clients check a minimum version).
OLLAMA_VERSION = "0.12.6"
LATEST = ":latest"


def routes(api) -> list[Route]:
    ollama = OllamaApi(api)
    writes = LibraryWrites(api)
    return [Route("/", ollama.root, methods=["GET", "HEAD"]),
            Route("/api/version", ollama.version, methods=["GET"]),
            Route("/api/tags", ollama.tags, methods=["GET"]),
            Route("/api/ps", ollama.ps, methods=["GET"]),
            Route("/api/show", ollama.show, methods=["POST"]),
            Route("/api/chat", ollama.chat, methods=["POST"]),
            Route("/api/generate", ollama.generate, methods=["POST"]),
            Route("/api/embed", ollama.embed, methods=["POST"]),
            Route("/api/embeddings", ollama.embeddings, methods=["POST"]),
            Route("/api/delete", writes.delete, methods=["DELETE"]),
            Route("/api/pull", writes.pull, methods=["POST"]),
            Route("/api/copy", ollama.writes_library, methods=["POST"]),
            Route("/api/create", ollama.writes_library, methods=["POST"]),
            Route("/api/push", ollama.writes_library, methods=["POST"])]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def tag(model_id: str) -> str:
    """A library id as Ollama clients write names: name:tag."""
    return model_id if ":" in model_id else model_id + LATEST


def _details(entry=None, info: dict | None = None) -> dict:
    info = info or {}
    arch = (entry.architecture if entry is not None else None) or ""
    params = (entry.parameters if entry is not None else None) or info.get("n_params") or 0
    quant = (entry.quantization if entry is not None else None) or ""
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch] if arch else None,
            "parameter_size": _size(params), "quantization_level": quant}


def _size(params: float) -> str:
    if not params:
        return ""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if params >= scale:
            return f"{params / scale:.1f}{unit}".replace(".0", "")
    return str(int(params))


class OllamaApi:
    def __init__(self, api):
        """api: the server's OpenAIApi, whose model pool, readers and engine path this dialect uses."""
        self.api = api

    # --- answering in Ollama's shape ---------------------------------------------------------------------
    async def _guarded(self, request: Request, handler) -> Response:
        try:
            return await handler(await self.api.body_of(request) if request.method == "POST" else None)
        except ApiError as exc:
            return exc.response(request.url.path)

    async def _serving(self, name) -> tuple[str, object]:
        """The id and backend a request's `model` names: name:tag as Ollama clients write it, :latest being the
        library id itself; a name nothing answers to is Ollama's 404."""
        if not isinstance(name, str) or not name.strip():
            raise invalid("'model' is required: a name from GET /api/tags.", "model")
        try:
            return await self.api.serving(name[:-len(LATEST)] if name.endswith(LATEST) else name)
        except ApiError as exc:
            if exc.status == 404:
                raise ApiError(404, f"model '{name}' not found") from None
            raise

    # --- what is here ----------------------------------------------------------------------------------------
    async def root(self, request: Request) -> Response:
        return PlainTextResponse("Ollama is running (Hearth)")

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": OLLAMA_VERSION})

    async def tags(self, request: Request) -> Response:
        import asyncio

        catalog = await asyncio.get_running_loop().run_in_executor(None, self.api.pool.catalog)
        models = []
        for entry in catalog:
            if entry.error is not None:
                continue
            when = Path(entry.path).stat().st_mtime if Path(entry.path).exists() else 0
            models.append({"name": tag(entry.id), "model": tag(entry.id), "size": entry.size_bytes,
                           "modified_at": datetime.fromtimestamp(when, timezone.utc).isoformat(),
                           "digest": _digest(entry.path), "details": _details(entry)})
        return JSONResponse({"models": models})

    async def ps(self, request: Request) -> Response:
        models = []
        for backend in self.api.pool.loaded():
            info = backend.info or {}
            name = self.api.pool.id_of(backend)
            if not name or not backend.info:
                continue
            models.append({"name": tag(name), "model": tag(name), "size": info.get("size_bytes") or 0,
                           "digest": _digest(info.get("path") or name), "details": _details(info=info),
                           "expires_at": "0001-01-01T00:00:00Z", "size_vram": 0,
                           "context_length": info.get("n_ctx")})
        return JSONResponse({"models": models})

    async def show(self, request: Request) -> Response:
        async def answer(body):
            shape = read(ShowBody, body or {})
            model, backend = await self._serving(shape.model or shape.name)
            info = backend.info or {}
            arch = (info.get("desc") or "").split(" ")[0] if info.get("desc") else ""
            media = info.get("media") or {}  # its projector's: Ollama's clients look for "vision" to send images
            capabilities = ["completion"] + (["tools"] if info.get("knows_tools") else []) + \
                (["thinking"] if info.get("opens_thinking") else []) + (["vision"] if media.get("vision") else []) + \
                (["audio"] if media.get("audio") else [])
            return JSONResponse({"modelfile": f"FROM {tag(model)}\n", "parameters": "", "template":
                                 info.get("chat_template") or "", "details": _details(info=info),
                                 "model_info": {"general.architecture": arch,
                                                "general.parameter_count": info.get("n_params"),
                                                f"{arch or 'model'}.context_length": info.get("n_ctx_train")},
                                 "capabilities": capabilities, "modified_at": _now()})
        return await self._guarded(request, answer)

    async def writes_library(self, request: Request) -> Response:
        return ApiError(400, f"{request.url.path} is not served by Hearth: a model in Hearth's library has one "
                             "name (its file's); pull one from Hugging Face with /api/pull hf.co/OWNER/REPO:QUANT, "
                             "or make one on the Models page.").response(request.url.path)

    # --- answers -----------------------------------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        async def answer(body):
            shape = read(ChatBody, body)
            if shape.messages == [] or (shape.messages is None and "model" in body):  # a load (keep_alive 0: unload)
                return await self._load_or_unload(shape, chat=True)
            gen = chat_request(openai_chat(shape, shape.messages, shape.tools), self.api.defaults)
            model, backend = await self._serving(shape.model)
            refuse_unless_takes(gen.messages, model, backend.info)
            tools = gen.tools.tools if gen.tools else None
            stream = self.api.chat_stream(backend, gen.messages, gen.sampling, tools)
            shape = _Shape(tag(model), chat=True, tools=gen.tools,
                           thinking=self.api.thinking(gen, backend), think=shape.think)
            return await self._respond(request, stream, shape, gen.stream)
        return await self._guarded(request, answer)

    async def generate(self, request: Request) -> Response:
        async def answer(body):
            shape = read_generate(body)
            images = ollama_images(shape.images, "images", "user")  # checked before a model is chosen
            if not shape.prompt and not shape.system and not images:
                return await self._load_or_unload(shape, chat=False)
            model, backend = await self._serving(shape.model)
            if shape.raw and images:
                raise invalid("'images' cannot go with 'raw': a raw prompt has no template to place them in; send "
                              "the request without raw.", "images")
            if shape.raw:  # the prompt as it is, no template
                gen = completion_request(openai_completion(shape), self.api.defaults)
                stream = self.api.completion_stream(backend, gen.prompt, gen.sampling)
                thinking = None
            else:
                chat = openai_chat(shape, ([{"role": "system", "content": shape.system}] if shape.system else [])
                                   + [{"role": "user", "content": with_images(images, shape.prompt or "")}])
                gen = chat_request(chat, self.api.defaults)
                refuse_unless_takes(gen.messages, model, backend.info)
                stream = self.api.chat_stream(backend, gen.messages, gen.sampling)
                thinking = self.api.thinking(gen, backend)
            return await self._respond(request, stream, _Shape(tag(model), chat=False, thinking=thinking,
                                                               think=shape.think), gen.stream)
        return await self._guarded(request, answer)

    async def _load_or_unload(self, shape, chat: bool) -> Response:
        """A request without messages (or prompt) loads the model; with keep_alive 0 it unloads it."""
        model, backend = await self._serving(shape.model)
        unload = shape.keep_alive in (0, "0", "0s", "0m")
        if unload:
            self.api.pool.unload(backend)
        done = {"model": tag(model), "created_at": _now(), "done": True,
                "done_reason": "unload" if unload else "load"}
        done.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
        return JSONResponse(done)

    async def _respond(self, request: Request, stream, shape: "_Shape", streaming: bool) -> Response:
        return await respond(request, stream, streaming, shape.whole,
                             lambda events: StreamingResponse(shape.lines(events), media_type="application/x-ndjson"))

    async def embed(self, request: Request) -> Response:
        return await self._embedding(request, EmbedBody, lambda vectors, done, model: {
            "model": tag(model), "embeddings": vectors, "prompt_eval_count": int(done.get("prompt_tokens") or 0)})

    async def embeddings(self, request: Request) -> Response:
        """The older endpoint: one prompt, one vector."""
        return await self._embedding(request, EmbeddingsBody, lambda vectors, _done, _model: {
            "embedding": vectors[0]})

    async def _embedding(self, request: Request, declared, shape) -> Response:
        """declared: the request's shape (its input in `input`, or the older `prompt`); shape(vectors, done, model):
        the answer's object."""
        async def answer(body):
            asked = read(declared, body)
            wanted = embedding_request({"model": asked.model, "dimensions": getattr(asked, "dimensions", None),
                                        "input": asked.input if declared is EmbedBody else asked.prompt})
            model, backend = await self._serving(asked.model)
            stream = self.api.start(backend, lambda sink: backend.embed(wanted.inputs, sink), again=True)
            events = await open_answer(request, stream, streaming=False)
            done = (await whole_answer(events))[1] if events is not None else None
            if done is None:
                return Response(status_code=499)
            return JSONResponse(shape(done["embeddings"], done, model))
        return await self._guarded(request, answer)


def _digest(path: str) -> str:
    import hashlib

    return hashlib.sha256(str(path).encode()).hexdigest()


class _Shape:
    """Ollama's response objects for one answer: NDJSON lines while it streams, one object when it does not."""

    def __init__(self, model: str, chat: bool, tools: ToolUse | None = None, thinking: bool | None = None,
                 think=None):
        self.model, self.chat = model, chat
        self.started = time.perf_counter()
        self.calls = CallReader(tools.names) if tools else None
        # A thinking model's thinking: its own field where the request said think, else dropped from the answer
        # (Ollama answers without it unless asked); None (reasoning_format none) leaves it in the text.
        # true, or a level ("low", "medium", "high": Ollama 0.12's, for models that think at one): asked for
        self.think = think is True or think in THINK_LEVELS
        self.opened = thinking
        self.splitter = ReasoningSplitter(thinking) if thinking is not None else None

    def _head(self) -> dict:
        return {"model": self.model, "created_at": _now()}

    def _piece(self, text: str, thought: str = "", calls=()) -> dict:
        if self.chat:
            message = {"role": "assistant", "content": text}
            if thought and self.think:
                message["thinking"] = thought
            if calls:
                message["tool_calls"] = [{"function": {"name": c.name, "arguments": c.input}} for c in calls]
            return {**self._head(), "message": message, "done": False}
        piece = {**self._head(), "response": text, "done": False}
        if thought and self.think:
            piece["thinking"] = thought
        return piece

    def _end(self, done: P.Done) -> dict:
        took = int((time.perf_counter() - self.started) * 1e9)
        prompt, completion = int(done.get("prompt_tokens") or 0), int(done.get("completion_tokens") or 0)
        end = self._piece("")
        cut = limit_cut(done, self.calls)  # the rule of every endpoint: the token limit or the context cut it
        end.update({"done": True, "done_reason": "length" if cut else "stop",
                    "total_duration": took, "load_duration": 0, "prompt_eval_count": prompt,
                    "prompt_eval_duration": int(1e9 * prompt / done["prompt_tok_s"]) if done.get("prompt_tok_s") else 0,
                    "eval_count": completion,
                    "eval_duration": int(1e9 * completion / done["gen_tok_s"]) if done.get("gen_tok_s") else 0})
        return end

    async def lines(self, events: AsyncIterator[P.Event]) -> AsyncIterator[bytes]:
        async for event in events:
            if isinstance(event, (P.Token, P.Done)):
                # One line a piece; at the end, what was held back (a possible tag's or call's start) in one more.
                piece = event.text if isinstance(event, P.Token) else ""
                thought, parts = stream_parts(self.splitter, self.calls, piece)
                text, calls = "".join(piece for piece, _ in parts), [call for _, made in parts for call in made]
                if text or calls or (thought and self.think):
                    yield _line(self._piece(text, thought, calls))
                if isinstance(event, P.Done):
                    yield _line(self._end(event))
            elif isinstance(event, P.Failed):  # after the first piece: the status went out already
                yield _line({"error": event.message})

    def whole(self, text: str, done: P.Done) -> dict:
        thought, text, calls = whole_parts(text, self.opened, self.calls)
        answer = self._piece(text, thought, calls)
        end = self._end(done)
        if self.chat:
            end["message"] = answer["message"]
        else:
            end["response"] = answer["response"]
            if "thinking" in answer:
                end["thinking"] = answer["thinking"]
        return end


def _line(obj: dict) -> bytes:
    return compact_json(obj) + b"\n"
