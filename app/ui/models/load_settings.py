"""How a model is loaded: engine runtime, GPU layers, threads, context, memory, KV type, speculation, context
policy and chat template.

The same panel edits the default load options in Settings (`defaults=True`): there every row has a button
back to Hearth's own default, enabled where the row differs from it, and neither a draft model nor a chat
template is offered (a draft must share the vocabulary of one model and a template suits one model's turn
markers, so both are chosen per model on the Models page).

The Runtime box offers the runtimes installed here (app/ui/models/manager.runtime_choices, read on a worker
thread: choosing may probe a runtime in a child process), each with its device and free memory; the GPU
layers slider is on where the chosen runtime has a device to offload to, and otherwise the note under it
says why in one sentence (no GPU runtime installed: how to build one).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPolygonF
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFileDialog, QFormLayout, QLabel, QPushButton, QSlider, QStyle,
                               QStyleOptionSlider, QToolButton, QWidget)

from app.core.gguf.chat_formats import BUILTIN_NAMES, PLAIN
from app.core.gguf.modelfile import above_trained_context
from app.core.metrics import default_threads
from app.protocol.option_fields import H2O_FLASH_OFF, LOAD_FIELDS, LOGICAL_CORES, kept_fields, with_values
from app.protocol.messages import CONTEXT_POLICIES, FLASH_ATTN, KV_TYPES, LoadOptions
from app.ui.widgets.clamped_spin import ClampingSpinBox
from app.ui.models.titles import row_title
from app.ui.widgets import combo, hbox, name_controls, wrapped

CTX_CHOICES = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
# The LoadOptions fields this panel's controls set; the other remembered settings (batch size, longest draft,
# window fraction) have no control here and are carried from set_options to options unchanged.
SHOWN = {"runtime", "n_gpu_layers", "n_threads", "n_ctx", "use_mmap", "use_mlock", "kv_type", "flash_attn",
         "draft_model", "lookup", "context_policy", "sink_tokens", "keep_system", "chat_template"}
# What a default can be set for (Settings): a draft model belongs to one model's vocabulary and a chat template to
# one model's turn markers, not to all.
DEFAULTABLE = SHOWN - {"draft_model", "chat_template"}
TEMPLATE_FILE = "Jinja file…"  # the Chat template box's entry that opens a file dialog
EXPERIMENTAL_POLICIES = ("h2o",)
FLASH_TIP = ("Flash attention: a faster attention kernel that needs less memory for long contexts; auto uses it "
             "where llama.cpp supports it")
HEARTH_DEFAULTS = LoadOptions()


def defaults_changed(options: LoadOptions) -> dict:
    """The default load options that differ from Hearth's own, as kept in the settings file."""
    return {name: getattr(options, name) for name in sorted(DEFAULTABLE)
            if getattr(options, name) != getattr(HEARTH_DEFAULTS, name)}


AUTO_ONLY = {"name": "auto", "label": "auto", "tip": "", "offloads": None, "note": ""}  # until the runtimes are read


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
        self.gpu_layers = MarkedSlider(Qt.Horizontal)
        self.gpu_layers.setRange(0, 32)
        self.gpu_value = QLabel("0")
        self.gpu_value.setMinimumWidth(70)
        self.gpu_layers.setToolTip("Layers computed on the GPU; the rest run on the CPU")
        self.gpu_layers.valueChanged.connect(self._on_gpu_layers_changed)
        gpu_row = hbox((self.gpu_layers, 1), self.gpu_value)
        self.gpu_reason = wrapped(name="hint")
        self.suggested_layers: int | None = None
        self.gpu_reason.hide()  # until the runtimes are read (set_runtime_choices)
        self.runtime = QComboBox()
        # A device's name and free memory make long entries: they elide rather than widen the pane.
        self.runtime.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.runtime.setMinimumContentsLength(16)
        self.runtime.setToolTip("The llama.cpp build the engine runs on: cpu, or a GPU runtime (vulkan, cuda) "
                                "with the device it offloads layers to; auto takes the first that sees a real GPU")
        self.runtime_rows: list[dict] = [AUTO_ONLY]
        self.runtimes_read = False
        self._loaded_offload: tuple[str, bool] | None = None  # (runtime, can offload) of the model loaded
        self.set_runtime_choices([])
        self.template = QComboBox()
        self.template.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.template.setMinimumContentsLength(16)
        self.template.addItem("auto: the model's own, else chosen by its vocabulary", "auto")
        self.template.addItem("plain: 'User:' / 'Assistant:' text", PLAIN)
        for name in sorted(BUILTIN_NAMES):
            self.template.addItem(name, name)
            self.template.setItemData(self.template.count() - 1, f"llama.cpp's built-in '{name}' template",
                                      Qt.ToolTipRole)
        self.template.addItem(TEMPLATE_FILE, None)
        self.template.setItemData(self.template.count() - 1, "A Jinja chat template from a file", Qt.ToolTipRole)
        self.template.setToolTip("How a chat is written for the model: auto uses the template in the model file, "
                                 "else the llama.cpp built-in its vocabulary's turn markers name, else plain text; "
                                 "choose another when answers show stray markers or never end")
        self._template_before = 0  # the entry to go back to when the file dialog is cancelled
        self.template.activated.connect(self._on_template_activated)

        self.threads = ClampingSpinBox("CPU threads")
        # 0 shows as "Auto": the engine moves the count with the machine's load (app/engine/decoding/threads.py).
        # More than the machine has is refused (check_options).
        self.threads.setRange(0, LOGICAL_CORES)
        self.threads.setSpecialValueText(f"Auto (up to {default_threads()})")
        self.threads.setToolTip("Auto: use every core, and fewer while other programs keep the CPU busy")
        self.threads.setValue(0)
        self.ctx = combo({n: f"{n:,} tokens" for n in CTX_CHOICES})
        self.ctx.setToolTip("How many tokens the model sees at once (prompt, chat and answer); the KV cache "
                            "grows with it")
        self.trained_ctx: int | None = None
        self.ctx_warning = wrapped(color="#f59e0b")
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
        self.flash.setToolTip(FLASH_TIP)
        self.spec_mode = QComboBox()
        self.spec_mode.addItems(["Off", "Draft model", "Prompt lookup (n-grams)"])
        self.spec_mode.setToolTip("A small model (or n-grams from the chat) guesses tokens that the model checks "
                                  "in one batch: same answer, faster when the guesses are cheap and good")
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
        draft_row = hbox((self.draft_choice, 1), self.draft_browse)
        # Whether the chosen draft can pay, said before Load (#49.3, app/core/library/draft_pay.py); one that cannot is left
        # out of the load unless the user insists.
        self.draft_note = wrapped(name="hint")
        self.draft_note.hide()
        self.draft_anyway = QCheckBox("Load it anyway")
        self.draft_anyway.setToolTip("Load the draft model although it costs too much to pay (to measure it, say)")
        self.draft_anyway.hide()
        # Predicted outputs for Regenerate and Edit (#49.4): a setting of the window's own, shown here beside the
        # load's speculation so that "Off" above is never read as covering it; it turns itself off when it costs
        # speed (app/ui/shell/main_window.py keeps it in the settings).
        self.reuse_answers = QCheckBox("Regenerate drafts from the old answer")  # narrow: fits the pane at 1024 px
        self.reuse_answers.setChecked(True)
        self.reuse_answers.setToolTip("Regenerate and Edit draft the new answer from the answer it replaces (the "
                                      "same answer, sooner). Its own setting, whatever speculative decoding says "
                                      "above; it turns itself off when it made an answer slower")
        self.policy = QComboBox()
        for name in CONTEXT_POLICIES:
            # h2o is labelled experimental until its benchmark shows where it wins (docs/window_benchmark.md).
            self.policy.addItem(f"{name} (experimental)" if name in EXPERIMENTAL_POLICIES else name, name)
        self.policy.setItemData(self.policy.findData("h2o"), "h2o: keep the first tokens, the recent ones and the "
                                "ones that got the most attention; turns flash attention off", Qt.ToolTipRole)
        self.policy.setToolTip("window: keep the first tokens (attention sinks) and slide over the rest")
        self.sinks = ClampingSpinBox("Attention sinks")
        self.sinks.setRange(0, 64)
        self.keep_system = QCheckBox("Keep the system prompt in the window")
        self.keep_system.setToolTip("When the window slides, the system prompt stays in view with the sinks")
        self.sinks.setToolTip("Tokens at the start that always stay in the KV cache (attention sinks, "
                              "StreamingLLM): the window slides over the rest without breaking the model")

        # (label, field, the option fields it sets, the widget whose tooltip the label repeats)
        rows = (("Runtime", self.runtime, ("runtime",), self.runtime),
                ("GPU layers", gpu_row, ("n_gpu_layers",), self.gpu_layers), ("", self.gpu_reason, (), None),
                ("CPU threads", self.threads, ("n_threads",), self.threads),
                ("Context size", self.ctx, ("n_ctx",), self.ctx), ("", self.ctx_warning, (), None),
                ("", self.mmap, ("use_mmap",), None), ("", self.mlock, ("use_mlock",), None),
                ("KV cache type", self.kv_type, ("kv_type",), self.kv_type),
                ("Flash attention", self.flash, ("flash_attn",), self.flash),
                ("Speculative decoding", self.spec_mode, ("lookup", "draft_model"), self.spec_mode),
                ("Draft model", draft_row, (), self.draft_choice), ("", self.draft_note, (), None),
                ("", self.draft_anyway, (), None), ("", self.reuse_answers, (), None),
                ("When context is full", self.policy, ("context_policy",), self.policy),
                ("Attention sinks", self.sinks, ("sink_tokens",), self.sinks),
                ("", self.keep_system, ("keep_system",), None),
                ("Chat template", self.template, ("chat_template",), self.template))
        for label, field, names, tipped in rows:
            if defaults and (field in (draft_row, self.template, self.reuse_answers, self.draft_note,
                                       self.draft_anyway)):
                continue
            caption = QLabel(label) if label else None
            if caption is not None and tipped is not None:
                caption.setToolTip(tipped.toolTip())  # hovering the name explains it too
            if caption is not None:  # a screen reader says the row's name, not the box's value ("f16")
                name_controls(field, label)
            if defaults and names:
                field = self._with_reset_button(field, names)
            form.addRow(caption, field) if caption is not None else form.addRow(field)
        if defaults:  # a draft model is chosen per model (it must share that model's vocabulary)
            self.spec_mode.model().item(1).setEnabled(False)
            self.spec_mode.setItemData(1, "A draft model is chosen per model, on the Models page", Qt.ToolTipRole)
        self.spec_mode.currentIndexChanged.connect(self._on_spec_mode_changed)
        self.policy.currentIndexChanged.connect(self._on_policy_changed)
        self.runtime.currentIndexChanged.connect(self._update_offload)
        for signal in (self.runtime.currentIndexChanged, self.template.currentIndexChanged,
                       self.gpu_layers.valueChanged, self.threads.valueChanged, self.ctx.currentIndexChanged,
                       self.mmap.toggled, self.mlock.toggled, self.kv_type.currentIndexChanged,
                       self.flash.currentIndexChanged, self.spec_mode.currentIndexChanged,
                       self.draft_choice.currentIndexChanged, self.policy.currentIndexChanged,
                       self.sinks.valueChanged, self.keep_system.toggled):
            signal.connect(self._on_changed)
        self._kept = {name: getattr(LoadOptions(), name) for name in kept_fields(LOAD_FIELDS, SHOWN)}
        self.set_options(LoadOptions())

    def _on_policy_changed(self, _index: int) -> None:
        policy = self.policy.currentData()
        self.sinks.setEnabled(policy in ("window", "h2o"))
        # h2o reads the attention probabilities, which flash attention never computes: the engine turns it off,
        # and the box says so rather than offering a choice that would not be kept.
        h2o = policy == "h2o"
        self.flash.setEnabled(not h2o)
        self.flash.setToolTip(H2O_FLASH_OFF if h2o else FLASH_TIP)

    def _with_reset_button(self, field, names: tuple[str, ...]) -> QWidget:
        button = QToolButton()
        button.setText("↺")  # the usual "back to default" arrow (LM Studio's too)
        button.setToolTip("Back to Hearth's default")
        button.setAccessibleName("Back to Hearth's default")
        button.clicked.connect(lambda: self.reset_to_hearth(names))
        self.reset_buttons[names] = button
        row = QWidget()
        hbox((field, 1), button, parent=row, margin=0)
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
        warning = above_trained_context(n, self.trained_ctx)  # hearth chat and serve say the same
        self.ctx_warning.setText(warning or "")
        self.ctx_warning.setVisible(bool(warning))

    # --- runtime ---------------------------------------------------------------
    def set_runtime_choices(self, rows: list[dict]) -> None:
        """The runtimes installed here (app/ui/runtime_text.choice_row); the one chosen stays chosen, and one that
        is chosen but no longer installed stays, said as such, so that loading says what happens to it."""
        chosen = self.runtime.currentData() or "auto"
        self.runtimes_read = bool(rows)
        self.runtime_rows = list(rows) or [AUTO_ONLY]
        self.runtime.blockSignals(True)
        self.runtime.clear()
        for row in self.runtime_rows:
            self.runtime.addItem(row["label"], row["name"])
            self.runtime.setItemData(self.runtime.count() - 1, row.get("tip") or None, Qt.ToolTipRole)
        self.runtime.blockSignals(False)
        self.set_runtime(chosen)
        self._update_offload()

    def set_runtime(self, name: str) -> None:
        index = self.runtime.findData(name)
        if index < 0:
            self.runtime.addItem(f"{name} · not installed" if self.runtimes_read else name, name)
            index = self.runtime.count() - 1
            if self.runtimes_read:
                self.runtime.setItemData(index, f"Loading with it runs the model on the CPU; `hearth runtimes "
                                                f"build {name}` installs it", Qt.ToolTipRole)
        self.runtime.setCurrentIndex(index)

    def runtime_row(self) -> dict:
        name = self.runtime.currentData() or "auto"
        if not self.runtimes_read:
            return {**AUTO_ONLY, "name": name}
        return next((row for row in self.runtime_rows if row["name"] == name),
                    {"name": name, "offloads": False, "note": f"The {name} runtime is not installed here, so the "
                     f"model runs on the CPU; `hearth runtimes build {name}` builds it."})

    def _update_offload(self, *_args) -> None:
        """The GPU layers slider is on where the chosen runtime can offload; else the note says why not."""
        row = self.runtime_row()
        offloads, note = row.get("offloads"), row.get("note") or ""
        if self._loaded_offload == ("cpu", True) and not offloads:
            offloads, note = True, ""  # a llama-cpp-python built with GPU support offloads on its own
        if offloads is None:  # the runtimes are not read yet: as the model loaded says, else on
            offloads = self._loaded_offload[1] if self._loaded_offload else True
        self.gpu_layers.setEnabled(bool(offloads))
        self.gpu_reason.setText("" if offloads else note)
        self.gpu_reason.setVisible(not offloads and bool(note))

    # --- chat template -----------------------------------------------------------
    def _on_template_activated(self, index: int) -> None:
        if self.template.itemData(index) is not None:
            self._template_before = index
            return
        path, _ = QFileDialog.getOpenFileName(self, "Chat template", "", "Jinja templates (*.jinja *.j2 *.txt);;"
                                                                          "All files (*)")
        if path:
            self.set_template(path)
        else:
            self.template.setCurrentIndex(self._template_before)

    def set_template(self, value: str | None) -> None:
        """auto, plain, a built-in name, or a Jinja file's path (added as an entry named by its file)."""
        value = value or "auto"
        index = self.template.findData(value)
        if index < 0:
            index = self.template.count() - 1  # before "Jinja file…"
            self.template.insertItem(index, Path(value).name, value)
            self.template.setItemData(index, value, Qt.ToolTipRole)
        self.template.setCurrentIndex(index)
        self._template_before = index

    def _on_spec_mode_changed(self, index: int) -> None:
        self.draft_choice.setEnabled(index == 1)
        self.draft_browse.setEnabled(index == 1)
        if index != 1:
            self.show_draft_verdict(None)

    def show_draft_verdict(self, verdict: dict | None) -> None:
        """Whether the chosen draft can pay (app/core/draft_pay.DraftVerdict as a dict), under the draft row."""
        self.draft_verdict = verdict
        self.draft_note.setText(verdict["sentence"] if verdict else "")
        self.draft_note.setStyleSheet("" if not verdict or verdict["pays"] else "color: #f59e0b")
        self.draft_note.setVisible(bool(verdict))
        self.draft_anyway.setVisible(bool(verdict) and not verdict["pays"])

    def load_options(self, model_path: str) -> LoadOptions:
        """What Load asks for: the options shown, less a draft model that cannot pay unless the user insists."""
        options = self.options(model_path)
        verdict = getattr(self, "draft_verdict", None)
        if options.draft_model and verdict and not verdict["pays"] and not self.draft_anyway.isChecked():
            options.draft_model = None
        return options

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
            runtime=self.runtime.currentData() or "auto", chat_template=self.template.currentData() or "auto",
            context_policy=self.policy.currentData() or "window", sink_tokens=self.sinks.value(),
            keep_system=self.keep_system.isChecked(),
        )
        return with_values(LoadOptions(model_path=model_path), {**self._kept, **shown})

    def show_gpu_offload(self, info: dict) -> None:
        """Whether the loaded model's runtime can offload, from its description: until the runtimes are read
        it decides the slider, and a llama-cpp-python built with GPU support offloads on the cpu runtime."""
        if "gpu_offload" not in info:  # a remote model: offloading is its server's business
            return
        runtime = (info.get("runtime") or {}).get("name") or "cpu"
        self._loaded_offload = (runtime, bool(info["gpu_offload"]))
        self._update_offload()

    def set_options(self, o: LoadOptions) -> None:
        self._kept = {name: getattr(o, name) for name in self._kept}
        self.set_runtime(o.runtime)
        self.set_template(o.chat_template)
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
        self.policy.setCurrentIndex(max(0, self.policy.findData(o.context_policy)))
        self.sinks.setValue(o.sink_tokens)
        self.keep_system.setChecked(o.keep_system)
