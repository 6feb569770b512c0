"""The engine client as a QObject: engine events become queued Qt signals.

EngineClient delivers events on its reader thread; one internal signal carries
them to the GUI thread (a queued connection, because the bridge lives there),
where they fan out into past-tense signals. Starting the engine blocks until
the child is up, so it runs in a short-lived worker thread; everything else
is a non-blocking write to the engine's stdin. When the engine dies the bridge
says so (`engine_crashed`) and brings it back with the last model.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.core.errors import HearthError
from app.engine import protocol as P
from app.engine.client import EngineClient

MAX_CRASHES = 3  # within CRASH_WINDOW_S; then the engine restarts without a model
CRASH_WINDOW_S = 60.0
# Tokens arrive merged at most this often (app.engine.coalesce), matching the transcript's FLUSH_MS:
# one event per token cost the window ~0.5 ms of CPU per token, CPU the engine's threads need.
STREAM_INTERVAL_MS = 60


def model_title(info: dict | None) -> str:
    """A loaded model's name for labels (a `loaded` event): its general.name, else its file; "" for none."""
    return (info.get("name") or info.get("model", "")) if info else ""


class EngineBridge(QObject):
    # Internal: from the reader/worker thread to the GUI thread.
    _event_arrived = Signal(object)

    engine_started = Signal()
    model_loading = Signal(object)  # LoadOptions
    model_loaded = Signal(object)
    load_progress = Signal(float)  # 0..1, about ten a second while llama.cpp reads the weights
    load_failed = Signal(str)
    token_received = Signal(str)
    stats_received = Signal(object)
    generation_finished = Signal(object)
    generation_failed = Signal(str)
    engine_crashed = Signal(str)
    engine_restarted = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.client = EngineClient(on_event=self._from_engine, below_caller=True)
        self.options: P.LoadOptions | None = None  # the model to keep loaded (reloaded after a crash)
        self.info: dict | None = None
        self.busy = False  # a chat command is running
        self.loading = False
        self._last_good: P.LoadOptions | None = None
        self.failed_options: P.LoadOptions | None = None  # the last load that failed, and why (error kind)
        self.load_error_kind: str | None = None
        self._crash_times: list[float] = []
        self._worker: threading.Thread | None = None
        self._starting = False
        self._closed = False
        self._restarting = False
        self._event_arrived.connect(self._on_event)

    # --- called on other threads ----------------------------------------
    def _from_engine(self, event: dict) -> None:
        if self._starting and event.get("ev") in (P.READY, P.ERROR):
            # EngineClient.start() waits for these on its own queue.
            self.client.events.put(event)
            if event.get("ev") == P.READY:
                return
        if not self._closed:
            self._event_arrived.emit(event)

    def _start_and_load(self, options: P.LoadOptions | None) -> None:
        self._starting = True
        try:
            self.client.start()
        except HearthError as exc:
            self._event_arrived.emit({"ev": "_start_failed", "message": str(exc)})
            return
        finally:
            self._starting = False
        self._event_arrived.emit({"ev": "_started"})
        if options is not None:
            self._send({"cmd": P.LOAD, "options": options.to_dict()})

    def _send(self, message: dict) -> bool:
        try:
            self.client.send(message)
            return True
        except HearthError as exc:
            self._event_arrived.emit({"ev": P.ERROR, "kind": "EngineCrashed", "message": str(exc)})
            return False

    # --- public API (GUI thread) ----------------------------------------
    @property
    def pid(self) -> int | None:
        return self.client.pid

    @property
    def ready(self) -> bool:
        return self.info is not None and not self.loading and self.client.alive

    def load(self, options: P.LoadOptions) -> None:
        """Load a model, starting the engine first if needed; never blocks."""
        self.options = options
        self.loading = True
        self.info = None
        self.model_loading.emit(options)
        if self.client.alive:
            self._send({"cmd": P.LOAD, "options": options.to_dict()})
        else:
            self._run_worker(options)

    def cancel_load(self) -> None:
        """A load cannot be interrupted inside llama.cpp: end the engine and start a fresh one."""
        if not self.loading:
            return
        # The engine restarts with the model loaded before, if there was one.
        self.options = self._last_good if self._last_good is not self.options else None
        self.loading = False
        self._restarting = True
        self.client.kill()

    def chat(self, messages: list[dict], sampling: P.SamplingOptions) -> bool:
        if not self.ready or self.busy:
            return False
        self.busy = True
        if not self._send({"cmd": P.CHAT, "messages": messages, "sampling": sampling.to_dict(),
                           "stream_interval_ms": STREAM_INTERVAL_MS}):
            self.busy = False
            return False
        return True

    def cancel(self) -> None:
        if self.busy and self.client.alive:
            try:
                self.client.cancel()
            except HearthError:
                pass

    def reset(self) -> None:
        """Forget the KV cache (the engine keeps it for the next turn of the same chat)."""
        if self.client.alive and not self.busy:
            self._send({"cmd": P.RESET})

    def close(self) -> None:
        self._closed = True
        if self._worker is not None:
            self._worker.join(timeout=30)
        self.client.close(timeout=3.0)

    def _run_worker(self, options: P.LoadOptions | None) -> None:
        if self._worker is not None and self._worker.is_alive():
            return
        self._worker = threading.Thread(target=self._start_and_load, args=(options,), name="engine-start",
                                        daemon=True)
        self._worker.start()

    # --- events (GUI thread) --------------------------------------------
    @Slot(object)
    def _on_event(self, event: dict) -> None:
        if self._closed:
            return
        kind = event.get("ev")
        if self._restarting and kind in (P.LOADED, P.PROGRESS):
            return  # from the engine being replaced (a cancelled load that finished as it was killed)
        handler = getattr(self, f"_on_{kind.lstrip('_')}", None)
        if handler is not None:
            handler(event)

    def _on_started(self, event: dict) -> None:
        if self._restarting:
            self._restarting = False
            self.engine_restarted.emit()
        self.engine_started.emit()

    def _on_start_failed(self, event: dict) -> None:
        self.loading = False
        self.load_failed.emit(event.get("message", "The engine did not start."))

    def _on_loaded(self, event: dict) -> None:
        self.loading = False
        self.info = event
        self._last_good = self.options
        self.model_loaded.emit(event)

    def _on_progress(self, event: dict) -> None:
        if self.loading:
            self.load_progress.emit(float(event.get("fraction", 0.0)))

    def _on_token(self, event: dict) -> None:
        self.token_received.emit(event.get("text", ""))

    def _on_stats(self, event: dict) -> None:
        self.stats_received.emit(event)

    def _on_done(self, event: dict) -> None:
        self.busy = False
        self.generation_finished.emit(event)

    def _on_ok(self, event: dict) -> None:
        pass

    def _on_exited(self, event: dict) -> None:
        pass

    def _on_error(self, event: dict) -> None:
        message = event.get("message", "The engine reported an error.")
        if event.get("kind") == "EngineCrashed":
            self._on_crash(message)
            return
        if self.loading:
            self._on_load_error(event, message)
        elif self.busy:
            self.busy = False
            self.generation_failed.emit(message)
        else:
            self.generation_failed.emit(message)

    def _on_load_error(self, event: dict, message: str) -> None:
        """A refused load loses nothing: the engine kept its model, or the last good one is loaded again."""
        self.loading = False
        self.failed_options, self.load_error_kind = self.options, event.get("kind")
        last = self._last_good
        if event.get("kept"):  # refused before unloading (app/engine/preflight.py)
            self.info, self.options = event["kept"], last
            self.load_failed.emit(message)
        elif last is not None and self.options is not last:
            self.load_failed.emit(f"{message} Loading {Path(last.model_path).name} again.")
            self.load(last)
        else:
            self.load_failed.emit(message)

    def _on_crash(self, message: str) -> None:
        if self._worker is not None and self._worker.is_alive():
            return  # the start in progress reports its own failure
        was_busy, was_loading = self.busy, self.loading
        self.busy = False
        self.info = None
        deliberate = self._restarting
        self._restarting = True
        self.client.close(timeout=1.0)
        if not deliberate:
            now = time.monotonic()
            self._crash_times = [t for t in self._crash_times if now - t < CRASH_WINDOW_S] + [now]
        if was_loading and not deliberate:
            # The model being loaded may be what crashes; go back to the last one that worked.
            self.options = self._last_good if self.options is not self._last_good else None
        if len(self._crash_times) > MAX_CRASHES:
            self.options = None  # crashing in a loop: keep an empty engine and let the user choose
        if not deliberate:
            self.engine_crashed.emit(message + " Hearth restarts it" + (" and reloads the model." if self.options
                                                                         else " without a model."))
            if was_loading and not was_busy:
                self.load_failed.emit(message)
        if self.options is not None:
            self.loading = True
            self.model_loading.emit(self.options)
        self._run_worker(self.options)
