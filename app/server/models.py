"""The models a server answers with: the one it started with, and library models loaded on demand (JIT).

Every model has one id, unique even ignoring case: the library's (app/core/library/__init__.py: the file's stem,
qualified where two entries share it). A request names a model as `hearth models` does: an exact match
wins, a name two models answer to is a 400 that lists them, never a guess. A request whose `model` names
another model of the library loads it in an engine of its own, with the server's load options, and waits for it. At most `max_models` are
loaded at once: the one used least recently and not answering makes room. With a TTL, a model that has
not been used for that long is unloaded. A name the library does not know is a 404; only library models
load, never an arbitrary path a client sends.

Thread-safe and blocking (a load takes seconds): the API calls it from a worker thread.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from app.core import library
from app.core.errors import HearthError
from app.backends.backend import Backend, EngineState
from app.protocol.messages import ErrorKind, LoadOptions
from app.server.edge.errors import ApiError, from_engine

REAP_INTERVAL_S = 1.0


def model_id(info: dict | None) -> str | None:
    """The name of a model served alone (no library beside it): its file name without .gguf."""
    return Path(info["path"]).stem if info and info.get("path") else None


@dataclass
class _Slot:
    backend: Backend
    path: str
    last_used: float = field(default_factory=time.monotonic)
    id: str | None = None  # the catalog's id for it, once known

    def current_path(self) -> str:
        return (self.backend.info or {}).get("path") or self.path


def _default_backend() -> Backend:
    from app.backends.supervisor import Supervisor

    return Supervisor()


class ModelPool:
    def __init__(self, first: Backend, load: LoadOptions | None = None, max_models: int = 1,
                 ttl_s: float | None = None, make_backend: Callable[[], Backend] = _default_backend):
        """first: the backend the server started with; load: the options models load with (None: no JIT)."""
        self.load_options = load
        self.max_models = max(1, max_models)
        self.ttl_s = ttl_s
        self._make_backend = make_backend
        self._lock = threading.RLock()  # the slots
        self._loading = threading.Lock()  # one load at a time: two would compete for memory
        self._slots: list[_Slot] = [_Slot(first, (first.info or {}).get("path") or "")]
        self._closed = threading.Event()
        if ttl_s:
            threading.Thread(target=self._reap, name="model-ttl", daemon=True).start()

    # --- what is loaded -----------------------------------------------------
    def loaded(self) -> list[Backend]:
        """The loaded models' backends, the one used last first."""
        with self._lock:
            return [s.backend for s in sorted(self._slots, key=lambda s: -s.last_used)]

    def catalog(self) -> list[library.LibraryEntry]:
        """What the server answers to, each with its unique id: the library's models (when it loads them on
        demand) and the loaded ones the library does not list. Blocking (it may read the library)."""
        entries = library.list_models() if self.load_options is not None else []
        with self._lock:
            slots = list(self._slots)
        for slot in slots:
            path = slot.current_path()
            if path and library.entry_for_path(path, entries) is None:
                info = slot.backend.info or {}
                entries.append(library.LibraryEntry(name=Path(path).name, path=path, source="file", owned=False,
                                                    size_bytes=info.get("size_bytes") or 0))
        library.assign_ids(entries)
        for slot in slots:
            entry = library.entry_for_path(slot.current_path(), entries) if slot.current_path() else None
            slot.id = entry.id if entry else None
        return entries

    def warm_catalog(self) -> None:
        """List the library once in the background, so that the first request naming a model finds the ids known
        (a request lists it itself when this has not finished)."""
        try:
            self.catalog()
        except Exception as exc:  # noqa: BLE001 - a failed warm-up costs the first request the listing, no more
            print(f"hearth: listing the model library failed: {exc}", file=sys.stderr, flush=True)

    def id_of(self, backend: Backend) -> str | None:
        """The id a loaded model is listed under (as known at its last request or listing)."""
        with self._lock:
            slot = next((s for s in self._slots if s.backend is backend), None)
        return (slot.id if slot else None) or model_id(backend.info)

    # --- choosing a model for a request --------------------------------------------
    def acquire(self, requested: str | None) -> tuple[str, Backend]:
        """The model id and backend that answer a request naming `requested` (None: the model used last)."""
        with self._lock:
            if requested:  # the usual case, a client naming what /v1/models listed: no library walk
                slot = next((s for s in self._slots if (s.id or model_id(s.backend.info)) == requested), None)
            else:
                slot = max(self._slots, key=lambda s: s.last_used) if self._slots else None
            if slot is not None:
                return self._ready(slot)
        if requested:
            entry = self._entry_of(requested)
            path = entry.path
            with self._lock:
                slot = next((s for s in self._slots if os.path.realpath(s.current_path()) == os.path.realpath(path)),
                            None)
            if slot is None:
                slot = self._load(path)
            slot.id = slot.id or entry.id  # the listing that found it named it
            return self._ready(slot)
        if self.load_options is None:
            raise ApiError(503, "No model is loaded.", "unavailable_error", code="model_loading")
        return self._ready(self._load(self.load_options.model_path))  # all were unloaded: the first comes back

    def _ready(self, slot: _Slot) -> tuple[str, Backend]:
        slot.last_used = time.monotonic()
        backend = slot.backend
        if (model_id(backend.info) is None or not backend.ready) and self.failed(backend):
            self._load_again(slot)
        if model_id(backend.info) is None or not backend.ready:
            raise ApiError(503, "The model is loading; try again in a moment.", "unavailable_error",
                           code="model_loading")
        # Its library id once a listing has named it (warm_catalog, at the start); its file's name until then: a
        # request for a loaded model never waits for a walk of the library's folders.
        return slot.id or model_id(backend.info), backend

    def _load(self, path: str) -> _Slot:
        """Load a model in an engine of its own. The models it makes room for are taken out of service but stay
        loaded until it has loaded: a file that cannot load (truncated, corrupt) costs the request a 400 naming
        it and why, never the working model. Only when the new one does not fit beside them are they let go
        first, and it is tried again."""
        with self._loading:
            with self._lock:
                for slot in self._slots:  # loaded meanwhile, or named differently
                    if os.path.realpath(slot.path) == os.path.realpath(path):
                        return slot
                victims = self._make_room()
            from app.backends.client import EngineClient

            # A draft model belongs to the model the server started with; prompt lookup works with any.
            options = replace(self.load_options, model_path=path, draft_model=None)
            backend = None
            try:
                for attempt in (1, 2):
                    backend = self._make_backend()
                    try:
                        EngineClient(backend).load(options)
                        break
                    except HearthError as exc:
                        backend.close()
                        kind = ErrorKind.of(exc)
                        if kind is ErrorKind.MODEL_TOO_BIG and victims and attempt == 1:
                            self._close(victims)  # it may fit once they are gone
                            victims = []
                            continue
                        raise self._load_error(path, kind, exc) from None
            except BaseException:
                with self._lock:  # back in service: nothing was lost
                    self._slots.extend(v for v in victims if v not in self._slots)
                raise
            self._close(victims)
            slot = _Slot(backend, path)
            with self._lock:
                self._slots.append(slot)
            return slot

    @staticmethod
    def _close(victims: list[_Slot]) -> None:
        for victim in victims:
            victim.backend.close()

    @staticmethod
    def _load_error(path: str, kind: ErrorKind, exc: HearthError) -> ApiError:
        """A requested model that cannot load is the request's to fix (another model): a 400 naming the file."""
        if kind in (ErrorKind.MODEL_FILE, ErrorKind.MODEL_LOAD, ErrorKind.INVALID_REQUEST):
            name = Path(path).name
            message = str(exc) if name in str(exc) else f"The model file {name} cannot be loaded: {exc}"
            return ApiError(400, f"{message} The model loaded before is still loaded.", param="model",
                            code="model_load_failed")
        return from_engine(kind, str(exc))

    @staticmethod
    def failed(backend: Backend) -> bool:
        """A local engine that wants a model but is not loading it: its last load failed (a file truncated under
        the server crashed the engine, and the restart could not load it). Nothing would try again by itself."""
        return backend.state is EngineState.FAILED

    def _load_again(self, slot: _Slot) -> None:
        """Try the failed model once more for this request (the file may be back); its reason if it fails."""
        from app.backends.client import EngineClient

        with self._loading:
            backend = slot.backend
            if not self.failed(backend):
                return  # another request's retry got there first
            options = backend.options
            try:
                EngineClient(backend).load(options)
            except HearthError as exc:
                name = Path(options.model_path).name
                reason = f"The model {name} could not be loaded: {exc}"
                print(f"hearth: {reason}", file=sys.stderr, flush=True)  # the server's terminal hears why too
                raise ApiError(503, f"{reason} The next request tries again.", "unavailable_error",
                               code="model_load_failed") from None

    def _entry_of(self, requested: str) -> library.LibraryEntry:
        """The entry a request's `model` names among the catalog's models; never an arbitrary path a client
        sends (only names are matched). 404 for a name nothing answers to, 400 for one several answer to."""
        try:
            entry = library.find(requested, self.catalog())
        except library.AmbiguousModel as exc:
            ids = ", ".join(repr(e.id) for e in exc.candidates)  # ids only: a client learns no file paths
            raise ApiError(400, f"'{requested}' names {len(exc.candidates)} models here: {ids}; name one by its id "
                                "(GET /v1/models).", param="model", code="model_ambiguous") from None
        if entry is not None:
            return entry
        names = ", ".join(repr(s.id or model_id(s.backend.info)) for s in self._slots if s.backend.info)
        raise ApiError(404, f"The model '{requested}' does not exist here; this server has {names or 'none'}"
                            f"{' and the models of its library (GET /v1/models)' if self.load_options else ''}.",
                       param="model", code="model_not_found")

    def _make_room(self) -> list[_Slot]:
        """Take the least recently used idle models out until a new one fits; 503 when all are answering."""
        victims = []
        while len(self._slots) >= self.max_models:
            idle = [s for s in self._slots if not s.backend.busy]
            if not idle:
                raise ApiError(503, f"All {self.max_models} loaded models are answering requests; try again in a "
                                    "moment.", "unavailable_error", code="model_busy")
            victim = min(idle, key=lambda s: s.last_used)
            self._slots.remove(victim)
            victims.append(victim)
        return victims

    # --- unloading --------------------------------------------------------------
    def _reap(self) -> None:
        """Unload models idle for longer than the TTL."""
        while not self._closed.wait(min(REAP_INTERVAL_S, self.ttl_s)):
            now = time.monotonic()
            with self._lock:
                for slot in self._slots:
                    if slot.backend.busy:  # answering: idle time counts from the end of the answer
                        slot.last_used = now
                expired = [s for s in self._slots if now - s.last_used > self.ttl_s]
                for slot in expired:
                    self._slots.remove(slot)
            self._close(expired)

    def unload(self, backend: Backend) -> None:
        """Take a model out of memory now (Ollama's keep_alive 0, as the TTL does after idle time); a later request
        naming it loads it again. A model answering is left to finish: it goes when that answer ends."""
        with self._lock:
            slot = next((s for s in self._slots if s.backend is backend), None)
            if slot is None:
                return
            self._slots.remove(slot)
        slot.backend.close()

    def stop_restarting(self) -> None:
        """The server is shutting down: no loaded model's engine is started again should it stop (a signal to
        the process group stops the engines first; app/backends/supervisor.py)."""
        with self._lock:
            backends = [s.backend for s in self._slots]
        for backend in backends:
            backend.stop_restarting()  # a remote backend has no engine to restart: it does nothing

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            slots, self._slots = self._slots, []
        self._close(slots)
