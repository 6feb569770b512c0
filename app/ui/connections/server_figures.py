"""A remote server's own figures for the monitor: llama-server's KV-cache use, from its /slots.

Only the server knows how full its KV cache is; the stream does not say. While the window talks to a
remote, this asks once a second (on a Tasks thread: a slow server never stalls the window), and a
server without /slots (vLLM, Ollama, another Hearth) is asked once and then left alone
(RemoteEndpoint.server_figures).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

from app.ui.bridge.engine_bridge import EngineBridge
from app.ui.bridge.worker import Tasks

POLL_MS = 1000


class ServerFigures(QObject):
    figures_received = Signal(dict)  # {"n_past", "n_ctx", "slots", "slots_busy"}: the monitor's stats keys

    def __init__(self, bridge: EngineBridge, parent: QObject | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.tasks = Tasks(self)
        self.timer = QTimer(self, interval=POLL_MS, timeout=self.poll)
        bridge.backend_changed.connect(self._on_backend_changed)

    def _on_backend_changed(self, _backend) -> None:
        if self.bridge.remote:
            self.timer.start()
        else:
            self.timer.stop()

    def poll(self) -> None:
        backend = self.bridge.backend
        if not self.bridge.remote or not self.bridge.ready or self.tasks.busy():
            return
        self.tasks.run(backend.server_figures, self._on_figures, lambda _message: None, "server-figures")

    def _on_figures(self, figures: dict | None) -> None:
        if figures is not None and self.bridge.remote:
            self.figures_received.emit(figures)

    def close(self) -> None:
        self.timer.stop()
        self.tasks.join()
