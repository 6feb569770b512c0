"""A blocking facade over a backend, for callers that wait: the CLI, benchmarks, tests.

`load` returns the model's description or raises the load's HearthError;
`chat` and `complete` return an iterator of that request's events that ends
with its Done event or raises its error. Events of one request reach only
that request's iterator, so several threads can share one backend.
Without a backend it supervises a local engine process of its own
(app.backends.supervisor), so a crash costs the request in flight an
EngineCrashed error and the engine comes back with the model, as in the window.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator

from app.core.errors import HearthError
from app.protocol import messages as P
from app.backends.backend import Backend, BackendListener

LOAD_TIMEOUT_S = 300.0


class _LoadWaiter(BackendListener):
    def __init__(self):
        self.outcome: queue.Queue = queue.Queue()

    def model_loaded(self, info: P.Loaded) -> None:
        self.outcome.put(info)

    def load_failed(self, error: P.Failed) -> None:
        self.outcome.put(error)


class EngineClient:
    def __init__(self, backend: Backend | None = None):
        if backend is None:
            from app.backends.supervisor import Supervisor

            backend = Supervisor()
        self.backend = backend

    # --- what the backend knows ----------------------------------------
    @property
    def loaded(self) -> dict | None:
        return self.backend.info

    @property
    def alive(self) -> bool:
        return self.backend.alive

    @property
    def pid(self) -> int | None:
        return self.backend.pid

    @property
    def log_path(self):
        return self.backend.log_path

    # --- blocking calls --------------------------------------------------
    def load(self, options: P.LoadOptions, timeout: float | None = LOAD_TIMEOUT_S) -> dict:
        waiter = _LoadWaiter()
        self.backend.add_listener(waiter)
        try:
            self.backend.load(options)
            return self._load_outcome(waiter, timeout)
        finally:
            self.backend.remove_listener(waiter)

    def wait_loaded(self, timeout: float | None = LOAD_TIMEOUT_S) -> dict:
        """The model's description once the backend has one loaded (after a crash it reloads it)."""
        waiter = _LoadWaiter()
        self.backend.add_listener(waiter)
        try:
            if self.backend.ready:
                return self.backend.info
            return self._load_outcome(waiter, timeout)
        finally:
            self.backend.remove_listener(waiter)

    @staticmethod
    def _load_outcome(waiter: _LoadWaiter, timeout: float | None) -> dict:
        try:
            outcome = waiter.outcome.get(timeout=timeout)
        except queue.Empty:
            raise HearthError("The engine did not finish loading the model in time.") from None
        if isinstance(outcome, P.Failed):
            raise outcome.error()
        return outcome

    def chat(self, messages: list[dict], sampling: P.SamplingOptions, stream_interval_ms: float = 0,
             timeout: float | None = None, tools: list[dict] | None = None) -> Iterator[P.Event]:
        """stream_interval_ms > 0: tokens arrive merged, at most one event per interval (app.protocol.coalesce).
        tools: OpenAI's function tools, for the chat template (MCP tools in the CLI and the window)."""
        return self._stream(lambda sink: self.backend.chat(messages, sampling, sink, stream_interval_ms,
                                                           tools=tools), timeout)

    def complete(self, prompt: str, sampling: P.SamplingOptions, timeout: float | None = None) -> Iterator[P.Event]:
        return self._stream(lambda sink: self.backend.complete(prompt, sampling, sink), timeout)

    def embed(self, inputs: list, timeout: float | None = None) -> P.Done:
        """The Done event of an embeddings request: "embeddings" (unit vectors), "prompt_tokens", "n_embd"."""
        return list(self._stream(lambda sink: self.backend.embed(inputs, sink), timeout))[-1]

    def _stream(self, start, timeout: float | None) -> Iterator[P.Event]:
        events: queue.Queue = queue.Queue()
        start(events.put)
        return _iterate(events, timeout)

    def cancel(self, request_id: int | None = None) -> None:
        self.backend.cancel(request_id)

    def reset(self, timeout: float = 30.0) -> None:
        self._acknowledged(self.backend.reset, timeout)

    def unload(self, timeout: float = 30.0) -> None:
        self._acknowledged(self.backend.unload, timeout)

    @staticmethod
    def _acknowledged(command, timeout: float) -> None:
        """Send a command without a result and wait until the engine has carried it out."""
        done = threading.Event()
        outcome: list[P.Event] = []
        command(lambda event: (outcome.append(event), done.set()))
        if not done.wait(timeout):
            raise HearthError("The engine did not answer in time.")
        if isinstance(outcome[0], P.Failed):
            raise outcome[0].error()

    def close(self, timeout: float = 5.0) -> None:
        self.backend.close(timeout=timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _iterate(events: queue.Queue, timeout: float | None) -> Iterator[P.Event]:
    while True:
        try:
            event = events.get(timeout=timeout)
        except queue.Empty:
            raise HearthError("The engine did not answer in time.") from None
        if isinstance(event, P.Failed):
            raise event.error()
        yield event
        if isinstance(event, P.Done):
            return
