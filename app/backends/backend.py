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

from typing import Callable, Protocol

from app.protocol import messages as P

Sink = Callable[[P.Event], None]


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


class Backend(Protocol):
    name: str
    info: dict | None  # the loaded model's description, None while none is loaded
    loading: bool

    @property
    def ready(self) -> bool: ...

    @property
    def busy(self) -> bool: ...  # an answer (or embeddings) is being generated

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
