"""The status bar's lasting state, right of its notices: what the engine is doing, which model, where it runs,
its speed, the context's fill and the engine's memory. It follows the bridge itself (#44: the main window wires
no page's news); the notices on the bar's left are the NoticeBar's (app/ui/shell/notice_bar.py).

The speed, context and memory change with every stats event while an answer streams: LiveText repaints them
without a relayout of the window.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QPushButton, QStatusBar

from app.protocol.messages import STATS, LoadOptions
from app.ui.bridge.engine_bridge import EngineBridge
from app.ui.models.titles import model_title
from app.ui.models.runtime_text import placement_text, placement_tip
from app.ui.widgets import ElidedLabel, LiveText


def memory_text(stats: dict) -> str:
    if stats.get("remote"):
        return "memory: on the server"
    text = f"engine {stats.get('rss_mb') or 0:.0f} MB"
    if stats.get("gpu_mb") is not None:
        text += f" · GPU {stats['gpu_mb']:.0f}/{stats.get('gpu_total_mb', 0):.0f} MB"
    return text


def after_weights_text(options: LoadOptions | None) -> str:
    """What a load does once its weights are read, which took 20 of 30 s with a draft model (#49.3)."""
    if options is not None and options.draft_model:
        return "loading the draft model and measuring its speed"
    if options is not None and options.lookup:
        return "measuring speculative decoding's costs"
    return "creating its context"


class StatusLabels(QObject):
    def _on_state(self, state) -> None:
        """An engine that is gone takes its figures with it (#55 D2: the dead engine's context and memory stayed
        on the bar while the new one loaded)."""
        from app.backends.backend import EngineState

        if state in (EngineState.RESTARTING, EngineState.STARTING, EngineState.STOPPED):
            self.ctx.setText("")
            self.mem.setText("")

    def set_simple(self, simple: bool, dock) -> None:
        """Simple: the figures stand for the monitor, and Graphs opens its dock."""
        self._dock = dock
        self.graphs.setVisible(simple)

    def __init__(self, bar: QStatusBar, bridge: EngineBridge, title: Callable[[object], str]):
        """title: the Models page's name of a model (a path or a loaded model's info), one name on every page."""
        super().__init__(bar)
        self.bridge = bridge
        self.title = title
        self.state = QLabel("Starting…")
        self.model = ElidedLabel("")  # a long file name ends in "…"; its tooltip is the path
        self.runtime = ElidedLabel("")  # where it runs: "Vulkan · 31/31 layers on llvmpipe"
        self.speed = LiveText()
        self.ctx = LiveText()
        self.mem = LiveText()
        # The simple window folds the live monitor into these figures; Graphs opens it (app/ui/shell/window_mode.py).
        self.graphs = QPushButton("Graphs")
        self.graphs.setFlat(True)
        self.graphs.setToolTip("Show the live graphs: speed, time to first token, memory, the context")
        self.graphs.hide()
        self._dock = None
        self.graphs.clicked.connect(lambda: self._dock is not None and self._dock.setVisible(not self._dock.isVisible()))
        # Permanent widgets: a notice (on the left) never hides the model and the speed.
        for label in (self.state, self.model, self.runtime, self.speed, self.ctx, self.mem, self.graphs):
            label.setContentsMargins(6, 0, 6, 0)
            bar.addPermanentWidget(label)
        b = bridge
        b.model_loading.connect(self._on_model_loading)
        b.model_loaded.connect(self._on_model_loaded)
        b.load_progress.connect(self._on_load_progress)
        b.load_failed.connect(self._on_load_failed)
        b.stats_received.connect(self._on_stats_received)
        b.generation_finished.connect(self._on_generation_finished)
        b.engine_crashed.connect(lambda _message: self.state.setText("Engine crashed; restarting…"))
        b.state_changed.connect(self._on_state)
        b.engine_restarted.connect(lambda: self.state.setText("Engine restarted"))
        b.turn_started.connect(lambda: self.state.setText("Generating…"))
        b.tool_approval_needed.connect(lambda _call: self.state.setText("Waiting for you: a tool call"))
        b.tool_call_finished.connect(lambda _call: self.state.setText("Generating…"))
        b.prompt_progress.connect(
            lambda done, total: total and self.state.setText(f"Reading the prompt… {100 * done / total:.0f}%"))
        b.model_unloaded.connect(self._on_model_unloaded)
        b.backend_changed.connect(self._on_backend_changed)

    def _clear_figures(self) -> None:
        for label in (self.model, self.runtime, self.speed, self.ctx, self.mem):
            label.setText("")

    def name_loaded_model(self, *_args) -> None:
        """The loaded model's name again (the library's names arrive after the first load; a missing file)."""
        if self.bridge.ready and not self.bridge.remote:
            self.model.setText(self.title(self.bridge.info))

    # --- the bridge's news ---------------------------------------------------------
    def _on_backend_changed(self, _backend) -> None:
        if not self.bridge.ready:  # a ready one reports model_loaded next, which sets every label
            self.state.setText("Connecting…" if self.bridge.remote else "No model loaded")
            self._clear_figures()

    def _on_model_loading(self, options: LoadOptions) -> None:
        if self.bridge.remote:
            self.state.setText(f"Connecting to {self.bridge.backend.base_url}…")
            self.model.setText("")
            return
        self.state.setText("Loading model…")
        self.model.setText(self.title(options.model_path))

    def _on_load_progress(self, fraction: float) -> None:
        if fraction < 1.0:
            self.state.setText(f"Loading model… {100 * fraction:.0f}%")
        else:
            self.state.setText(f"Loading model… weights read; {after_weights_text(self.bridge.options)}…")

    def _on_model_loaded(self, info: dict) -> None:
        # A remote model says so, and where it runs.
        self.state.setText("Ready · remote" if info.get("remote") else "Ready")
        self.model.setText(f"{model_title(info)} · runs on {info['endpoint']}" if info.get("remote")
                           else self.title(info))
        self.model.setToolTip(info.get("path", ""))
        self.runtime.setText(placement_text(info))  # "" for a remote model: its server's business
        self.runtime.setToolTip(placement_tip(info))
        self.speed.setText("")  # the last model's speed is not this one's
        self.ctx.setText(f"context {info.get('n_ctx') or '?'}")
        self.mem.setText(memory_text(info))

    def _on_load_failed(self, _message: str) -> None:
        self.state.setText("Ready" if self.bridge.ready else "No model loaded")
        # The model the engine kept when it refused the new one before unloading; else none.
        info = self.bridge.info if self.bridge.ready else None
        self.model.setText(self.title(self.bridge.info))
        self.runtime.setText(placement_text(info))
        self.runtime.setToolTip(placement_tip(info))

    def _on_model_unloaded(self) -> None:
        self.state.setText("No model loaded")
        self._clear_figures()

    def generation_started(self) -> None:
        self.state.setText("Waiting its turn…" if self.bridge.waiting_turn else "Generating…")
        self.speed.setText("")  # the last answer's speed is not this one's

    def _on_stats_received(self, stats: dict) -> None:
        if self.state.text().startswith("Reading the prompt"):
            self.state.setText("Generating…")  # read: the answer's figures follow
        if stats.get("completion_tokens") or stats.get("ev") != STATS:  # no "0.0 tok/s" before the first token
            self.speed.setText(f"{stats.get('gen_tok_s') or 0:.1f} tok/s")
        if stats.get("n_ctx") and stats.get("n_past") is not None:
            self.ctx.setText(f"context {stats.get('n_past', 0)}/{stats['n_ctx']}")
        if stats.get("rss_mb"):
            self.mem.setText(memory_text(stats))

    def _on_generation_finished(self, done: dict) -> None:
        self.state.setText("Ready · remote" if self.bridge.remote else "Ready")
        self._on_stats_received(done)

    def conversation_changed(self) -> None:
        """Another chat: the last answer's speed and context fill belong to the chat left."""
        self.speed.setText("")
        if self.bridge.ready and self.bridge.info:
            self.ctx.setText(f"context {self.bridge.info.get('n_ctx') or '?'}")

