"""Ollama's /api/pull and /api/delete over Hearth's library (#54.3).

Ollama pulls a Hugging Face GGUF by the name `hf.co/OWNER/REPO:QUANT` (`:latest`, or no tag, for the repository's
default choice); that is the one name form Hearth can honour, so it is the one /api/pull takes: the file comes
through Hearth's own downloader (app/core/library/hub.py: resumed, its SHA-256 checked) into the models folder,
where the library lists it at once, as `hearth models pull OWNER/REPO --quant QUANT` would. A name from Ollama's
own registry (`llama3.2`) is refused in a sentence that says the form to use. The progress is Ollama's: NDJSON
lines `{"status": "pulling manifest"}`, `{"status": "pulling OWNER/REPO", "total", "completed"}`, ..., `{"status":
"success"}` (one object with `stream: false`); a failure after the first line is a last `{"error": ...}` line, as
Ollama sends it. One pull at a time: another is a 503 with Retry-After. A client that leaves cancels its pull (the
partial file stays, and the next pull resumes it).

/api/delete removes a model as the Models page and `hearth models rm` do: the files Hearth downloaded are deleted,
a linked import or another app's model is only forgotten (its file stays); the bundled model and a loaded model
are refused in a sentence.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from app.core.errors import HearthError
from app.server.edge.errors import ApiError, invalid
from app.server.edge.request_shape import read
from app.server.ollama.request import DeleteBody, PullBody

HF_HOSTS = ("hf.co/", "huggingface.co/")
PROGRESS_EVERY_S = 0.25  # at most four progress lines a second, as Ollama's own client redraws
REGISTRY_HINT = ("Hearth pulls GGUF models from Hugging Face: name one as hf.co/OWNER/REPO:QUANT (for example "
                 "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M); Ollama's own registry is not Hearth's.")


def hf_name(name) -> tuple[str, str | None]:
    """'hf.co/OWNER/REPO[:QUANT]' -> ('OWNER/REPO', 'QUANT' or None for the default choice); a 400 otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise invalid("'model' is required: the model to pull, as hf.co/OWNER/REPO:QUANT.", "model")
    text = name.strip()
    host = next((h for h in HF_HOSTS if text.lower().startswith(h)), None)
    if host is None:
        raise invalid(f"'{text}' is not a Hugging Face name. {REGISTRY_HINT}", "model")
    repo, _, quant = text[len(host):].partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise invalid(f"'{text}' does not name a repository as hf.co/OWNER/REPO:QUANT.", "model")
    return repo, (None if quant.lower() in ("", "latest") else quant.upper())


@dataclass
class _Pull:
    """One download under way: its progress lines (None once it ended), its cancel, its job."""
    lines: asyncio.Queue
    cancel: threading.Event
    job: asyncio.Future | None = None


class LibraryWrites:
    def __init__(self, api):
        """api: the server's OpenAIApi (its model pool)."""
        self.api = api
        self._pulling = False  # a download is running: set when it starts, cleared when it ends

    # --- /api/pull -----------------------------------------------------------------------------------------
    async def pull(self, request: Request) -> Response:
        try:
            body = read(PullBody, await self.api.body_of(request))
            repo, quant = hf_name(body.model or body.name)
            stream = True if body.stream is None else body.stream
            if not isinstance(stream, bool):
                raise invalid("'stream' must be true or false.", "stream")
            if self._pulling:
                raise ApiError(503, "A pull is under way on this server; try again when it is done.",
                               "unavailable_error", headers={"Retry-After": "5"})
        except ApiError as exc:
            return exc.response(request.url.path)
        lines = _lines(self._start(repo, quant))
        if stream:
            return StreamingResponse(_ndjson(lines), media_type="application/x-ndjson")
        last = {}
        try:
            async for last in lines:
                if "error" in last:
                    status = last.pop("_status", 500)
                    return JSONResponse(last, status_code=status)
        finally:
            await lines.aclose()  # a client that left cancels its download here too
        return JSONResponse(last)

    def _start(self, repo: str, quant: str | None) -> _Pull:
        """The download, started now on a worker thread; the one-pull bound holds until it has ended (a client
        that left stops it at its next block, but a pull whose stream never began still runs to its end)."""
        from app.core.library import hub

        loop = asyncio.get_running_loop()
        pull = _Pull(asyncio.Queue(), threading.Event())
        shown = [0.0]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            if now - shown[0] >= PROGRESS_EVERY_S or done >= total:
                shown[0] = now
                loop.call_soon_threadsafe(pull.lines.put_nowait, {"status": f"pulling {repo}", "digest": repo,
                                                                  "total": total, "completed": done})

        def ended() -> None:
            self._pulling = False
            pull.lines.put_nowait(None)

        def work():
            try:
                return hub.pull(repo, quant=quant, progress=progress, cancel=pull.cancel)
            finally:
                loop.call_soon_threadsafe(ended)

        self._pulling = True
        pull.job = loop.run_in_executor(None, work)
        return pull

    # --- /api/delete ---------------------------------------------------------------------------------------
    async def delete(self, request: Request) -> Response:
        from app.core.library import carry_out, plan_removal

        try:
            body = read(DeleteBody, await self.api.body_of(request))
            name = body.model or body.name
            if not isinstance(name, str) or not name.strip():
                raise invalid("'model' is required: a name from GET /api/tags.", "model")
            model = name.removesuffix(":latest")
            loop = asyncio.get_running_loop()
            # A name from /api/tags only (never a path): the library's ids, as the other endpoints read them.
            entry = next((e for e in await loop.run_in_executor(None, self.api.pool.catalog) if e.id == model), None)
            if entry is None:
                raise ApiError(404, f"model '{name}' not found")
            removal = await loop.run_in_executor(None, plan_removal, entry.path)  # the bundled model: refused
            if entry.id in {self.api.pool.id_of(b) for b in self.api.pool.loaded()}:
                raise invalid(f"'{name}' is loaded: unload it first (keep_alive 0), then delete it.", "model")
            await loop.run_in_executor(None, carry_out, removal)
        except HearthError as exc:  # the bundled model, a file that cannot be deleted: one sentence
            return invalid(str(exc)).response(request.url.path)
        except ApiError as exc:
            return exc.response(request.url.path)
        return Response(status_code=200)


async def _lines(pull: _Pull) -> AsyncIterator[dict]:
    """Ollama's progress lines for a download; a failure is a last {"error": ...} line (with the status a
    stream: false answer takes, under "_status")."""
    from app.core.library.hub import NotFoundError

    try:
        yield {"status": "pulling manifest"}
        while (line := await pull.lines.get()) is not None:
            yield line
        try:
            result = await pull.job
        except HearthError as exc:
            yield {"error": str(exc), "_status": 404 if isinstance(exc, NotFoundError) else 400}
            return
        yield {"status": "verifying sha256 digest" if result.verified else "verifying size"}
        yield {"status": "writing manifest"}  # the models folder is the library: nothing more to write
        yield {"status": "success"}
    finally:
        pull.cancel.set()  # the client left (or the pull ended): a download still running stops at its next block


async def _ndjson(lines: AsyncIterator[dict]) -> AsyncIterator[bytes]:
    async for line in lines:
        line.pop("_status", None)
        yield json.dumps(line).encode() + b"\n"
