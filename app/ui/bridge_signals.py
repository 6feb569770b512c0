"""The backend's news (its listener calls, on the supervisor's threads) as the EngineBridge's Qt signals, which
reach the window's slots queued, on the GUI thread, in the order they were emitted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.backends.backend import BackendListener
from app.protocol import messages as P

if TYPE_CHECKING:
    from app.ui.engine_bridge import EngineBridge


class BridgeListener(BackendListener):
    """The supervisor's news as the bridge's signals."""

    def __init__(self, bridge: EngineBridge):
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
