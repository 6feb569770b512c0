"""The seam every client talks through, and every backend implements.

Clients: the window (app/ui, through a thin Qt adapter), the CLI
(app/commands, through the blocking facade below), the API server and the
benchmarks. Backends: the local engine process (app.backends.supervisor.Supervisor)
and, next, a remote OpenAI-compatible endpoint. A backend is asynchronous and
thread-safe: `load` returns at once and reports to listeners; `chat` and
`complete` return a request id at once and send that request's events
(Token, Stats, then one Done or Failed; app.protocol.messages) to the sink given
with it, on the backend's own thread; `embed` likewise, with one Done that
carries the vectors. A sink and a listener must not block.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Callable, Protocol

from app.protocol import messages as P

Sink = Callable[[P.Event], None]


class EngineState(str, Enum):
    """What a backend is doing, said by the backend (`Backend.state`, and `state_changed` news), never guessed
    from its fields. Ollama's runner has the same explicit status (llm/server.go)."""

    STOPPED = "stopped"  # no engine: not started yet, or closed
    STARTING = "starting"  # the engine process is starting (or restarting after an end it chose)
    LOADING = "loading"  # a model is being loaded
    EMPTY = "empty"  # the engine is up without a model (none chosen, unloaded)
    READY = "ready"  # a model is loaded and nothing runs
    BUSY = "busy"  # a model is loaded and a request runs
    STALLED = "stalled"  # one step ran past half its budget, or the watchdog is ending the engine
    RESTARTING = "restarting"  # the engine ended (a crash, the watchdog) and a new one is on its way
    FAILED = "failed"  # the last load failed and no model is loaded (load_error says why)


class BackendListener:
    """What a backend tells every client about the model; override what you need (no-ops here)."""

    def engine_started(self) -> None: ...

    def engine_restarted(self) -> None: ...

    def model_loading(self, options: P.LoadOptions) -> None: ...

    def load_progress(self, fraction: float) -> None: ...

    def model_loaded(self, info: P.Loaded) -> None: ...

    def load_failed(self, error: P.Failed) -> None: ...

    def engine_crashed(self, error: P.Failed) -> None: ...

    def engine_error(self, error: P.Failed) -> None: ...

    def state_changed(self, state: EngineState) -> None: ...


class StateNews:
    """A backend's listeners and what it tells them; its `state_changed` news is told when the state it says has
    changed since it last told them. Backends call it wherever their state may have changed (each news it tells,
    each request's start and end). A backend sets `listeners` to a list of its own."""

    _said_state: EngineState | None = None
    listeners: list[BackendListener]

    def add_listener(self, listener: BackendListener) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: BackendListener) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    def _tell(self, call: Callable[[BackendListener], None]) -> None:
        for listener in list(self.listeners):
            call(listener)
        self._state_news()

    def _state_news(self) -> None:
        state = self.state
        if state is not self._said_state:
            self._said_state = state
            for listener in list(self.listeners):
                listener.state_changed(state)


class Backend(Protocol):
    name: str
    info: dict | None  # the loaded model's description, None while none is loaded
    loading: bool

    @property
    def ready(self) -> bool: ...

    @property
    def busy(self) -> bool: ...  # an answer (or embeddings) is being generated

    @property
    def state(self) -> EngineState: ...

    @property
    def alive(self) -> bool: ...  # the engine answers (a local process runs; a remote server is configured)

    @property
    def pid(self) -> int | None: ...  # the local engine process's id; None for a remote server

    @property
    def log_path(self) -> Path | None: ...  # the local engine's log; None for a remote server

    @property
    def stalled(self) -> str | None: ...  # why the engine is not answering although a model is loaded

    def stop_restarting(self) -> None: ...  # this process is shutting down: start no engine again

    def add_listener(self, listener: BackendListener) -> None: ...

    def remove_listener(self, listener: BackendListener) -> None: ...

    def load(self, options: P.LoadOptions) -> None: ...

    def cancel_load(self) -> None: ...

    def chat(self, messages: list[dict], sampling: P.SamplingOptions, sink: Sink,
             stream_interval_ms: float = 0, truncate: bool = True, tools: list[dict] | None = None) -> int: ...

    def complete(self, prompt: str, sampling: P.SamplingOptions, sink: Sink,
                 stream_interval_ms: float = 0, truncate: bool = True) -> int: ...

    def embed(self, inputs: list, sink: Sink) -> int: ...  # one Done: embeddings, prompt_tokens, n_embd

    def cancel(self, request_id: int | None = None) -> None: ...

    def reset(self, sink: Sink | None = None) -> int: ...

    def unload(self, sink: Sink | None = None) -> int: ...

    def models(self) -> list[dict]: ...

    def stats(self) -> dict: ...

    def close(self, timeout: float = 3.0) -> None: ...
