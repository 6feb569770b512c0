"""The backend's news (its listener calls, on the supervisor's threads) as the EngineBridge's Qt signals, which
reach the window's slots queued, on the GUI thread, in the order they were emitted."""

from __future__ import annotations

from app.backends.backend import BackendListener
from app.protocol import messages as P

# Tokens arrive merged at most this often (app.protocol.coalesce): the one batching stage between a token and the
# screen (the transcript shows each merged piece at once). One event per token cost the window ~0.5 ms of CPU per
# token, CPU the engine's threads need. Here, beside the
# listener, so that the bridge and the answers with tools (app/ui/bridge/tool_answer.py) share it without importing
# each other.
STREAM_INTERVAL_MS = 80


class BridgeListener(BackendListener):
    """The supervisor's news as the bridge's signals."""

    def __init__(self, bridge):
        """bridge: the EngineBridge (app/ui/bridge/engine_bridge.py) whose signals this emits."""
        self.bridge = bridge

    def engine_started(self) -> None:
        self.bridge.engine_started.emit()

    def engine_restarted(self) -> None:
        self.bridge.engine_restarted.emit()

    def model_loading(self, options: P.LoadOptions) -> None:
        self.bridge.model_loading.emit(options)

    def load_progress(self, fraction: float) -> None:
        self.bridge.load_progress.emit(fraction)

    def model_loaded(self, info: P.Loaded) -> None:
        self.bridge.model_loaded.emit(info)

    def load_failed(self, error: P.Failed) -> None:
        self.bridge.load_failed.emit(error.message)

    def engine_crashed(self, error: P.Failed) -> None:
        self.bridge.engine_crashed.emit(error.message)

    def engine_error(self, error: P.Failed) -> None:
        self.bridge.generation_failed.emit(error.message)

    def state_changed(self, state) -> None:
        self.bridge.state_changed.emit(state)
