"""How a model is loaded: GPU layers, threads, context, memory, KV type, speculation, context policy.

The same panel edits the default load options in Settings (`defaults=True`): there every row has a button
back to Hearth's own default, enabled where the row differs from it, and a draft model is not offered (it
must share the vocabulary of one model, so it is chosen per model on the Models page).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPolygonF
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QPushButton, QSlider, QSpinBox, QStyle, QStyleOptionSlider, QToolButton, QWidget)

from app.core.metrics import default_threads
from app.engine.option_fields import LOAD_FIELDS, LOGICAL_CORES, kept_fields, with_values
from app.engine.protocol import CONTEXT_POLICIES, FLASH_ATTN, KV_TYPES, LoadOptions
from app.ui.models.titles import row_title

CTX_CHOICES = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
# The LoadOptions fields this panel's controls set; the other remembered settings (batch size, longest draft,
# window fraction) have no control here and are carried from set_options to options unchanged.
SHOWN = {"n_gpu_layers", "n_threads", "n_ctx", "use_mmap", "use_mlock", "kv_type", "flash_attn", "draft_model",
         "lookup", "context_policy", "sink_tokens", "keep_system"}
# What a default can be set for (Settings): a draft model belongs to one model's vocabulary, not to all.
DEFAULTABLE = SHOWN - {"draft_model"}
HEARTH_DEFAULTS = LoadOptions()


def defaults_changed(options: LoadOptions) -> dict:
    """The default load options that differ from Hearth's own, as kept in the settings file."""
    return {name: getattr(options, name) for name in sorted(DEFAULTABLE)
            if getattr(options, name) != getattr(HEARTH_DEFAULTS, name)}


CPU_ONLY_BUILD = ("This build of llama.cpp runs on the CPU only; install llama-cpp-python built with GPU "
                  "support (for example CMAKE_ARGS=\"-DGGML_CUDA=on\") to offload layers.")


class MarkedSlider(QSlider):
    """A slider with one value marked by a small triangle under the groove (the suggested GPU layers)."""

    MARK_COLOR = "#f59e0b"

    def __init__(self, orientation=Qt.Horizontal, parent=None):
        super().__init__(orientation, parent)
        self.mark: int | None = None
        self.setMinimumHeight(26)

    def set_mark(self, value: int | None) -> None:
        self.mark = value
        self.update()

    def mark_x(self) -> int | None:
        """The mark's x position in widget pixels (None without a mark)."""
        if self.mark is None:
            return None
        opt = QStyleOptionSlider()
        self.initStyleOption(opt)
        handle = self.style().subControlRect(QStyle.CC_Slider, opt, QStyle.SC_SliderHandle, self)
        groove = self.style().subControlRect(QStyle.CC_Slider, opt, QStyle.SC_SliderGroove, self)
        span = groove.width() - handle.width()
        pos = QStyle.sliderPositionFromValue(self.minimum(), self.maximum(), min(self.mark, self.maximum()), span)
        return groove.x() + pos + handle.width() // 2

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        x = self.mark_x()
        if x is None:
            return
        painter = QPainter(self)
        painter.setRenderHint(QPainter.Antialiasing)
        color = QColor(self.MARK_COLOR)
        if not self.isEnabled():
            color.setAlpha(140)
        painter.setPen(Qt.NoPen)
        painter.setBrush(color)
        bottom = self.height() - 1
        painter.drawPolygon(QPolygonF([QPointF(x, bottom - 6), QPointF(x - 5, bottom), QPointF(x + 5, bottom)]))
        painter.end()


class LoadSettings(QWidget):
    def __init__(self, parent=None, defaults: bool = False):
        super().__init__(parent)
        self.reset_buttons: dict[tuple[str, ...], QToolButton] = {}  # the fields of a row -> its button
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        # Labels go above their fields when the pane is narrow (a 1024-pixel screen) instead of cutting them.
        form.setRowWrapPolicy(QFormLayout.WrapLongRows)
        gpu_row = QHBoxLayout()
        self.gpu_layers = MarkedSlider(Qt.Horizontal)
        self.gpu_layers.setRange(0, 32)
        self.gpu_value = QLabel("0")
        self.gpu_value.setMinimumWidth(70)
        self.gpu_layers.setToolTip("Layers computed on the GPU; the rest run on the CPU")
        self.gpu_layers.valueChanged.connect(self._on_gpu_layers_changed)
        gpu_row.addWidget(self.gpu_layers, 1)
        gpu_row.addWidget(self.gpu_value)
        self.gpu_reason = QLabel()
        self.gpu_reason.setWordWrap(True)
        self.gpu_reason.setObjectName("hint")
        self.suggested_layers: int | None = None
        self.gpu_reason.hide()  # until the engine says whether its build can offload (show_gpu_offload)

        self.threads = QSpinBox()
        # 0 shows as "Auto": the engine moves the count with the machine's load (app/engine/threads.py).
        # More than the machine has is refused (check_options).
        self.threads.setRange(0, LOGICAL_CORES)
        self.threads.setSpecialValueText(f"Auto (up to {default_threads()})")
        self.threads.setToolTip("Auto: use every core, and fewer while other programs keep the CPU busy")
        self.threads.setValue(0)
        self.ctx = QComboBox()
        for n in CTX_CHOICES:
            self.ctx.addItem(f"{n:,} tokens", n)
        self.ctx.setToolTip("How many tokens the model sees at once (prompt, chat and answer); the KV cache "
                            "grows with it")
        self.trained_ctx: int | None = None
        self.ctx_warning = QLabel()
        self.ctx_warning.setWordWrap(True)
        self.ctx_warning.setStyleSheet("color: #f59e0b")
        self.ctx_warning.hide()
        self.ctx.currentIndexChanged.connect(self._check_context)
        self.mmap = QCheckBox("Map the file into memory (mmap)")
        self.mmap.setToolTip("Read the weights from the file as needed: loads fast and shares memory with the "
                             "file cache")
        self.mlock = QCheckBox("Lock the model in RAM (mlock)")
        self.mlock.setToolTip("Keep the weights from being swapped out; needs enough free RAM")
        self.kv_type = QComboBox()
        self.kv_type.addItems(list(KV_TYPES))
        self.kv_type.setToolTip("q8_0 halves and q4_0 quarters the KV cache's memory, at a small accuracy cost")
        self.flash = QComboBox()
        self.flash.addItems(list(FLASH_ATTN))
        self.flash.setToolTip("Flash attention: a faster attention kernel that needs less memory for long "
                              "contexts; auto uses it where llama.cpp supports it")
        self.spec_mode = QComboBox()
        self.spec_mode.addItems(["Off", "Draft model", "Prompt lookup (n-grams)"])
        self.spec_mode.setToolTip("A small model (or n-grams from the chat) guesses tokens that the model checks "
                                  "in one batch: same answer, faster when the guesses are cheap and good")
        draft_row = QHBoxLayout()
        # The library's models that share the vocabulary of the chosen one (filled by the Models page), and
        # any file picked with Browse….
        self.draft_choice = QComboBox()
        self.draft_choice.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.draft_choice.setMinimumContentsLength(12)
        self.draft_choice.setToolTip("Smaller models in the library with the same vocabulary as this one")
        self.draft_browse = QPushButton("Browse…")
        self.draft_browse.setToolTip("Choose any GGUF file as the draft model; it must share this model's "
                                     "vocabulary")
        self.draft_browse.clicked.connect(self._on_browse_draft)
        draft_row.addWidget(self.draft_choice, 1)
        draft_row.addWidget(self.draft_browse)
        self.policy = QComboBox()
        self.policy.addItems(list(CONTEXT_POLICIES))
        self.policy.setToolTip("window: keep the first tokens (attention sinks) and slide over the rest")
        self.sinks = QSpinBox()
        self.sinks.setRange(0, 64)
        self.keep_system = QCheckBox("Keep the system prompt in the window")
        self.keep_system.setToolTip("When the window slides, the system prompt stays in view with the sinks")
        self.sinks.setToolTip("Tokens at the start that always stay in the KV cache (attention sinks, "
                              "StreamingLLM): the window slides over the rest without breaking the model")

        # (label, field, the option fields it sets, the widget whose tooltip the label repeats)
        rows = (("GPU layers", gpu_row, ("n_gpu_layers",), self.gpu_layers), ("", self.gpu_reason, (), None),
                ("CPU threads", self.threads, ("n_threads",), self.threads),
                ("Context size", self.ctx, ("n_ctx",), self.ctx), ("", self.ctx_warning, (), None),
                ("", self.mmap, ("use_mmap",), None), ("", self.mlock, ("use_mlock",), None),
                ("KV cache type", self.kv_type, ("kv_type",), self.kv_type),
                ("Flash attention", self.flash, ("flash_attn",), self.flash),
                ("Speculative decoding", self.spec_mode, ("lookup", "draft_model"), self.spec_mode),
                ("Draft model", draft_row, (), self.draft_choice),
                ("When context is full", self.policy, ("context_policy",), self.policy),
                ("Attention sinks", self.sinks, ("sink_tokens",), self.sinks),
                ("", self.keep_system, ("keep_system",), None))
        for label, field, names, tipped in rows:
            if defaults and field is draft_row:
                continue
            caption = QLabel(label) if label else None
            if caption is not None and tipped is not None:
                caption.setToolTip(tipped.toolTip())  # hovering the name explains it too
            if defaults and names:
                field = self._with_reset_button(field, names)
            form.addRow(caption, field) if caption is not None else form.addRow(field)
        if defaults:  # a draft model is chosen per model (it must share that model's vocabulary)
            self.spec_mode.model().item(1).setEnabled(False)
            self.spec_mode.setItemData(1, "A draft model is chosen per model, on the Models page", Qt.ToolTipRole)
        self.spec_mode.currentIndexChanged.connect(self._on_spec_mode_changed)
        self.policy.currentTextChanged.connect(lambda p: self.sinks.setEnabled(p == "window"))
        for signal in (self.gpu_layers.valueChanged, self.threads.valueChanged, self.ctx.currentIndexChanged,
                       self.mmap.toggled, self.mlock.toggled, self.kv_type.currentIndexChanged,
                       self.flash.currentIndexChanged, self.spec_mode.currentIndexChanged,
                       self.draft_choice.currentIndexChanged, self.policy.currentIndexChanged,
                       self.sinks.valueChanged, self.keep_system.toggled):
            signal.connect(self._on_changed)
        self._kept = {name: getattr(LoadOptions(), name) for name in kept_fields(LOAD_FIELDS, SHOWN)}
        self.set_options(LoadOptions())

    def _with_reset_button(self, field, names: tuple[str, ...]) -> QWidget:
        button = QToolButton()
        button.setText("↺")  # the usual "back to default" arrow (LM Studio's too)
        button.setToolTip("Back to Hearth's default")
        button.setAccessibleName("Back to Hearth's default")
        button.clicked.connect(lambda: self.reset_to_hearth(names))
        self.reset_buttons[names] = button
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(field, 1) if isinstance(field, QWidget) else layout.addLayout(field, 1)
        layout.addWidget(button)
        return row

    def reset_to_hearth(self, names: tuple[str, ...]) -> None:
        """Put these fields back to Hearth's own defaults; the others stay."""
        current = self.options("")
        self.set_options(replace(current, **{name: getattr(HEARTH_DEFAULTS, name) for name in names}))

    def _on_changed(self, *_args) -> None:
        """A reset button is enabled only where its row differs from Hearth's default."""
        if self.reset_buttons:
            current = self.options("")
            for names, button in self.reset_buttons.items():
                button.setEnabled(any(getattr(current, n) != getattr(HEARTH_DEFAULTS, n) for n in names))

    def _on_gpu_layers_changed(self, value: int) -> None:
        text = "all" if value >= self.gpu_layers.maximum() else str(value)
        if self.suggested_layers is not None:
            text += f" (suggested {self.suggested_layers})"
        self.gpu_value.setText(text)

    def set_layer_count(self, n_layers: int | None, suggested: int | None = None) -> None:
        if n_layers:
            at_all = self.gpu_layers.value() >= self.gpu_layers.maximum()
            self.gpu_layers.setMaximum(n_layers)
            if at_all:  # "all" stays all on a model with more layers than the slider had
                self.gpu_layers.setValue(n_layers)
        self.suggested_layers = suggested
        self.gpu_layers.set_mark(suggested)
        self.gpu_layers.setToolTip("Layers computed on the GPU; the rest run on the CPU" +
                                   (f". Suggested for this machine: {suggested} (the orange mark)"
                                    if suggested is not None else ""))
        self._on_gpu_layers_changed(self.gpu_layers.value())

    def set_trained_context(self, n_ctx_train: int | None) -> None:
        """Mark the context sizes above what the chosen model was trained for, and warn when one is chosen."""
        self.trained_ctx = n_ctx_train or None
        for i in range(self.ctx.count()):
            n = self.ctx.itemData(i)
            above = bool(self.trained_ctx) and n > self.trained_ctx
            self.ctx.setItemText(i, f"{n:,} tokens" + (" (above trained)" if above else ""))
        self._check_context()

    def _check_context(self, *_args) -> None:
        n = self.ctx.currentData()
        above = bool(self.trained_ctx) and n is not None and n > self.trained_ctx
        self.ctx_warning.setText(f"This model was trained on {self.trained_ctx:,} tokens; beyond that its answers "
                                 "usually fall apart, and the KV cache costs memory for nothing." if above else "")
        self.ctx_warning.setVisible(above)

    def _on_spec_mode_changed(self, index: int) -> None:
        self.draft_choice.setEnabled(index == 1)
        self.draft_browse.setEnabled(index == 1)

    def _on_browse_draft(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Draft model", "", "GGUF models (*.gguf)")
        if path:
            self.set_draft(path)

    def set_draft_choices(self, rows: list[dict]) -> None:
        """The library's models that can draft for the chosen one [(library row)]; the draft chosen stays."""
        chosen = self.draft_path()
        self.draft_choice.clear()
        for row in rows:
            self.draft_choice.addItem(row_title(row), row.get("path"))
        if not rows:
            self.draft_choice.addItem("no smaller model in the library shares its vocabulary", None)
        if chosen:
            self.set_draft(chosen)

    def set_draft(self, path: str | None) -> None:
        if not path:
            return
        index = self.draft_choice.findData(path)
        if index < 0:
            self.draft_choice.addItem(Path(path).name, path)
            index = self.draft_choice.count() - 1
        self.draft_choice.setCurrentIndex(index)

    def draft_path(self) -> str | None:
        return self.draft_choice.currentData() or None

    def options(self, model_path: str) -> LoadOptions:
        gpu = self.gpu_layers.value() if self.gpu_layers.isEnabled() else 0
        if self.gpu_layers.isEnabled() and gpu >= self.gpu_layers.maximum():
            gpu = -1
        mode = self.spec_mode.currentIndex()
        shown = dict(
            n_ctx=self.ctx.currentData(), n_threads=self.threads.value() or None, n_gpu_layers=gpu,
            use_mmap=self.mmap.isChecked(), use_mlock=self.mlock.isChecked(), kv_type=self.kv_type.currentText(),
            flash_attn=self.flash.currentText(),
            draft_model=self.draft_path() if mode == 1 else None, lookup=mode == 2,
            context_policy=self.policy.currentText(), sink_tokens=self.sinks.value(),
            keep_system=self.keep_system.isChecked(),
        )
        return with_values(LoadOptions(model_path=model_path), {**self._kept, **shown})

    def show_gpu_offload(self, info: dict) -> None:
        """Whether the engine's llama.cpp build can offload, from a loaded model's description: the window's
        process does not import llama.cpp to ask (a third of a second before its first paint)."""
        if "gpu_offload" not in info:  # a remote model: offloading is its server's business
            return
        supported = bool(info["gpu_offload"])
        self.gpu_layers.setEnabled(supported)
        self.gpu_reason.setText("" if supported else CPU_ONLY_BUILD)
        self.gpu_reason.setVisible(not supported)

    def set_options(self, o: LoadOptions) -> None:
        self._kept = {name: getattr(o, name) for name in self._kept}
        self.gpu_layers.setValue(self.gpu_layers.maximum() if o.n_gpu_layers < 0 else o.n_gpu_layers)
        self.threads.setValue(o.n_threads or 0)
        index = self.ctx.findData(o.n_ctx)
        if index < 0:
            self.ctx.addItem(f"{o.n_ctx:,} tokens", o.n_ctx)
            index = self.ctx.count() - 1
        self.ctx.setCurrentIndex(index)
        self.mmap.setChecked(o.use_mmap)
        self.mlock.setChecked(o.use_mlock)
        self.kv_type.setCurrentText(o.kv_type)
        self.flash.setCurrentText(o.flash_attn)
        self.spec_mode.setCurrentIndex(1 if o.draft_model else 2 if o.lookup else 0)
        self.set_draft(o.draft_model)
        self._on_spec_mode_changed(self.spec_mode.currentIndex())
        self.policy.setCurrentText(o.context_policy)
        self.sinks.setValue(o.sink_tokens)
        self.keep_system.setChecked(o.keep_system)
