"""The Models page: the library, Hugging Face search and download, quantize and convert, a model's details
and fit verdict, and the load settings.

The load settings shown are the chosen model's own: what the user changed for it this session, else what
it was last loaded with, else the default load options (Settings), as LM Studio keeps a model's settings.

Everything that touches the disk, the network or a child process runs on a
Tasks thread; the long jobs (download, quantize, convert) go through one
JobBar with progress and Cancel. Their results join the library and the
table refreshes; their errors reach the status bar as notices (`noticed`).

Over 600 lines because it holds the library table, the details, the fit and the load flow of one page; the
load flow (load_selected and its failure states) is the next to move out.
"""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QFileDialog, QHeaderView, QLabel, QMessageBox, QPushButton, QSizePolicy, QSplitter,
                               QTableWidgetItem, QTabWidget, QWidget)

from app.ui.widgets.notices import ERROR, INFO, Notice
from app.core.units import human_size
from app.protocol.messages import ErrorKind, LoadOptions
from app.ui.widgets.clamped_spin import say_clamps
from app.ui.bridge.engine_bridge import EngineBridge
from app.ui.models.titles import model_title
from app.ui.models import manager
from app.ui.models.convert_panel import ConvertPanel
from app.ui.models.hub_panel import HubPanel
from app.ui.models.load_settings import LoadSettings
from app.ui.settings import shape
from app.ui.models.quality_pane import QualityPane
from app.ui.settings.settings_dialog import default_load_options
from app.ui.models.missing_files import MissingFiles, with_last_known
from app.ui.models.titles import info_title, path_title
from app.ui.models.runtime_text import format_text, placement_text
from app.ui.models.speculation_text import loaded_text
from app.ui.bridge.worker import Tasks
from app.ui.widgets import JobBar, STRETCH, VerticalScroll, button, combo, group, hbox, picking_table, vbox, wrapped

COLUMNS = ["Name", "Type", "Size", "Source"]


LIBRARY_ROWS_KEPT = 3  # the library shows at least this many models, whatever the screen

class ModelsView(QWidget):
    load_requested = Signal(object)  # LoadOptions
    noticed = Signal(object)  # a Notice (app.ui.widgets.notices) for the window's status bar
    library_changed = Signal(str)  # the path a job added (download, quantize, convert)
    library_listed = Signal(object)  # the library's rows, after each reading

    def __init__(self, bridge: EngineBridge, settings: dict, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.imported: list[str] = list(shape.value(settings, "imported_models"))
        self.tasks = Tasks(self)
        self.models: list[dict] = []
        self._select_after_refresh: str | None = None  # a job's new file, chosen once the table has it
        # Files that failed to load this session, with the reason: marked in the table and the fit verdict.
        self.failed: dict[str, str] = {}
        self.relocated: dict[str, str] = {}  # {a file's old path: where Locate… found it} (#49.8)
        self._failure: tuple[str, str] | None = None  # (path, sentence) of the latest failed load, kept on screen

        self.table = picking_table(COLUMNS, "Model library")
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.import_button = button("Import…", self._on_import)
        self.refresh_button = button("Refresh", self.refresh)
        self.delete_button = button("Delete", self._on_delete,
                                    "Delete a model Hearth downloaded or made; imported files are only forgotten")
        self.quant_type = combo(dict(manager.quant_types()))
        self.quant_type.setAccessibleName("Quantization type")
        self.quant_type.setCurrentIndex(max(0, self.quant_type.findData("Q4_K_M")))
        self.quantize_button = button("Quantize", self.quantize_selected,
                                      "Make a smaller copy of the chosen model with llama.cpp's quantizer")
        # Said before the user starts: a source that is already quantized loses twice (they may still go on).
        self.requant_note = wrapped(color="#f59e0b")
        self.requant_note.hide()
        self._inspected: tuple[str, dict] | None = None  # (path, its header) of the model described
        self.missing = MissingFiles(self)  # rows whose file went away: Locate… or Remove from library
        # Quantizing and its quality: details a simple window shows only when asked (set_simple).
        self.making = QWidget()
        self.quality = QualityPane()  # each type's measured quality on the user's text, and the recommendation
        vbox(hbox(QLabel("Quantize to"), (self.quant_type, 1), self.quantize_button), self.requant_note,
               self.quality, parent=self.making, margin=0)
        # On a short screen the library keeps its rows and these details scroll (#55 C: at 1024x600 the library
        # shrank to a row and a half under the advice and the quality table).
        self.table.setMinimumHeight(self.table.horizontalHeader().sizeHint().height()
                                    + LIBRARY_ROWS_KEPT * self.table.verticalHeader().defaultSectionSize()
                                    + 2 * self.table.frameWidth())
        self.making_scroll = VerticalScroll(self.making, name="Quantizing and quality", flat=True)
        self.making_scroll.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Preferred)
        lib_page = QWidget()
        vbox((self.table, 1), hbox(self.import_button, self.refresh_button, STRETCH, self.missing.locate_button,
                                    self.delete_button),
               self.making_scroll, parent=lib_page, margin=6)
        self.hub = HubPanel(self.tasks)
        # A search's failure is said as a download's is: on the page's line (the latest there) and the status bar.
        self.hub.error_reported.connect(lambda message: self.show_error(message, "models.hub"))
        self.converter = ConvertPanel()
        self.jobs = JobBar(self.tasks)
        self.sources = QTabWidget()
        self.sources.addTab(lib_page, "Library")
        self.sources.addTab(self.hub, "Download")
        self.sources.addTab(self.converter, "Convert")

        self.details = wrapped("Choose a model to see its details.")
        self.details.setTextFormat(Qt.RichText)
        self.details.setAlignment(Qt.AlignTop | Qt.AlignLeft)
        self.details.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.fit_label = wrapped()
        self.status = wrapped()
        # The engine's decision about speculative decoding for the loaded model.
        self.speculation = wrapped(name="hint")
        self.speculation.hide()
        # Which chat format the loaded model got and why, a base model said as such, and where it runs (with the
        # sentence when that is not the runtime asked for): under the details while the loaded model is chosen.
        self.loaded_note = wrapped(name="hint")
        self.loaded_note.hide()
        self.runtime_rows: list[dict] = []  # the Runtime box's entries, as last read (Settings shows them too)
        self.load_settings = LoadSettings()
        self.defaults = default_load_options(settings)
        # {model path: the options it was last loaded with}
        self.per_model: dict[str, dict] = dict(shape.value(settings, "model_load_options"))
        self._edited: dict[str, LoadOptions] = {}  # settings changed for a model this session, not loaded yet
        self._shown_for: str | None = None  # the model whose settings the pane shows
        self._described: str | None = None  # the model whose details were last asked for
        last = settings.get("load_options")
        if last is not None:
            self.load_settings.set_options(LoadOptions.from_dict(last))
            if isinstance(last.get("model_path"), str):  # the last load, kept before per-model options were
                self.per_model.setdefault(last["model_path"], last)
                self._shown_for = last["model_path"]
        else:
            self.load_settings.set_options(self.defaults)
        self.load_button = button("Load model", self.load_selected)
        self._anyway: tuple | None = None  # (path, n_ctx, kv_type) the user may load despite the fit verdict
        self._cancelled: str | None = None  # the file whose load the user cancelled
        self.load_button.setDefault(True)
        self.cancel_button = button("Cancel loading", self.cancel_load)
        self.cancel_button.setEnabled(False)

        left = QWidget()
        vbox((self.sources, 1), self.jobs, parent=left, margin=0)
        # How it loads and runs: the simple window shows it behind "Show details" (set_simple).
        self.load_details = QWidget()
        vbox(self.loaded_note, group("Load settings", self.load_settings, self.speculation),
               parent=self.load_details, margin=0)
        right = QWidget()
        vbox(group("Details", self.details), self.fit_label, self.load_details, STRETCH, parent=right)
        self.details_button = QPushButton("Show details")
        self.details_button.setCheckable(True)
        self.details_button.setToolTip("Load settings, quantizing, quality measures and converting")
        self.details_button.hide()  # the full window shows everything
        self._simple = False
        # A wrapped label's minimum height is one line: where the pane is taller than the window, the layout
        # squeezed the details to their title (the settings grew a runtime, a template and a longer GPU note).
        # Each label keeps the height its text needs, and the pane scrolls instead.
        for label in (self.details, self.fit_label, self.loaded_note, self.speculation):
            label.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Minimum)
        scroll = self.load_pane = VerticalScroll(right)
        scroll.setAccessibleName("Model details and load settings")
        # As needed, not off: with it off a window narrower than the settings cut them ("0 (sug", "CPU onl").
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAsNeeded)
        # The Load button stays in sight below the scrolling settings, at any window height.
        right_pane = QWidget()
        vbox((scroll, 1), hbox(self.details_button, (self.status, 1), self.cancel_button, self.load_button),
               parent=right_pane, margin=0)
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(right_pane)
        splitter.setSizes([380, 640])
        splitter.setStretchFactor(1, 1)  # a wider window widens the details and settings, not the table
        hbox(splitter, parent=self, margin=6)

        self.details_button.toggled.connect(lambda _on: self.set_simple(self._simple))
        self.table.itemSelectionChanged.connect(self._on_selection_changed)
        self.quality.measure_requested.connect(self.measure_quality)
        self.hub.download_requested.connect(self.download)
        # A search error is said once, in the Download tab's note where the user searched (it was said there,
        # under the Library and in the status bar, and stayed under the Library after it was resolved).
        self.converter.convert_requested.connect(self.convert)
        self.jobs.job_finished.connect(self._on_job_finished)
        self.jobs.job_failed.connect(self.show_error)
        self.jobs.job_cancelled.connect(lambda kind: self._said_plainly(f"The {kind} was cancelled."))
        self.sources.currentChanged.connect(self._on_source_tab_changed)
        pane = self.load_settings
        for box in (pane.ctx, pane.kv_type, pane.runtime, pane.spec_mode, pane.draft_choice):
            box.currentIndexChanged.connect(self._update_fit)
        self._fit_shown: dict | None = None  # the last fit answer, both ways when a draft is chosen (_show_fit)
        self.load_settings.draft_anyway.toggled.connect(lambda _on: self._show_fit())
        self.quant_type.currentIndexChanged.connect(self._check_requantize)
        bridge.model_loading.connect(self._on_model_loading)
        bridge.model_loaded.connect(self._on_model_loaded)
        bridge.model_loaded.connect(self.load_settings.show_gpu_offload)
        bridge.load_failed.connect(self._on_load_failed)
        bridge.load_progress.connect(self._on_load_progress)
        bridge.model_unloaded.connect(self.speculation.hide)
        bridge.model_unloaded.connect(self._show_loaded_note)
        say_clamps(self, self.noticed)  # a typed value out of range, clamped: said on the status bar too

    def set_simple(self, simple: bool) -> None:
        """The simple window (app/ui/shell/window_mode.py): the library with Download, Import, Load and the fit verdict;
        load settings, quantizing, quality and Convert behind Show details. The full window shows them all."""
        self._simple = simple
        shown = not simple or self.details_button.isChecked()
        self.details_button.setVisible(simple)
        self.details_button.setText("Hide details" if self.details_button.isChecked() else "Show details")
        self.making_scroll.setVisible(shown)
        self.load_details.setVisible(shown)
        self.sources.setTabVisible(self.sources.indexOf(self.converter), shown)

    def start(self) -> None:
        """Read the library (and whether conversion can run): the window asks once it has painted, since the
        reading thread's imports (gguf, numpy) would hold the window's own thread up while it builds."""
        self.refresh()
        self.tasks.run(manager.converter_note, self.converter.set_converter_note, self.show_error, "converter")

    # --- library -----------------------------------------------------------------
    def refresh(self) -> None:
        """The library and the runtimes installed (one built in a terminal meanwhile shows after Refresh)."""
        extra, loaded = list(self.imported), self.loaded_path()
        self.tasks.run(lambda: manager.list_models(extra, [loaded] if loaded else []), self._on_models_listed,
                       self.show_error, "library", latest=True)
        self.tasks.run(manager.runtime_choices, self._on_runtimes_listed, self.show_error, "runtimes", latest=True)

    def _on_runtimes_listed(self, rows: list[dict]) -> None:
        self.runtime_rows = rows
        self.load_settings.set_runtime_choices(rows)

    def _on_models_listed(self, models: list[dict]) -> None:
        current = self.selected_path()
        self.models = models = with_last_known(models, self.models)
        self.table.setRowCount(len(models))
        for row, m in enumerate(models):
            values = [m.get("name", ""), m.get("quant", "?"), human_size(m.get("size_bytes", 0) or 0),
                      m.get("source", "")]
            for col, value in enumerate(values):
                item = QTableWidgetItem(str(value))
                item.setToolTip(m.get("path", ""))
                self.table.setItem(row, col, item)
        self._mark_rows()
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        paths = [m.get("path") for m in models]
        target = self._select_after_refresh or current or (
            self.bridge.options.model_path if self.bridge.options else None)
        self._select_after_refresh = None
        if target in paths:
            self.table.selectRow(paths.index(target))
        elif models:
            self.table.selectRow(0)
        if self.selected_path() != self._described or self.missing.changed():
            # The row chosen is the one that was: Qt says nothing, yet another file is in it now (a new copy
            # sorted above the model it was made from), or its file went away, which is to be shown.
            self._on_selection_changed()
        self.library_listed.emit(models)

    def _mark_rows(self) -> None:
        """The loaded model in bold with "loaded", a file that failed in red with "failed to load"."""
        loaded = self.loaded_path()
        for row, m in enumerate(self.models):
            item = self.table.item(row, 0)
            if item is None:
                continue
            path = m.get("path")
            text, font = m.get("name", ""), item.font()
            font.setBold(path == loaded)
            # No colour of its own: the view's palette draws it, in the theme of the moment (a brush taken
            # from the palette here kept light-theme black text on the dark theme's background).
            item.setData(Qt.ForegroundRole, None)
            # The mark leads the name: a narrow column elides the end of a long name.
            if m.get("missing"):
                text = self.missing.mark(item, m, path == loaded)
            elif path == loaded:
                text = f"● {text} (loaded)"
            elif path in self.failed:
                text = f"⚠ {text} (failed to load)"
                item.setForeground(QColor("#ef4444"))
                item.setToolTip(f"{path}\n{self.failed[path]}")
            item.setFont(font)
            item.setText(text)

    def show_loaded_mark(self) -> None:
        self._mark_rows()

    def loaded_path(self) -> str | None:
        """The local model loaded now (None for none, or a remote one), where its file is now if it was located
        after it went away (the engine still runs it from memory, under the old path)."""
        info = self.bridge.info if self.bridge.ready and not self.bridge.remote else None
        path = info.get("path") if info else None
        return self.relocated.get(path, path)

    def move_model(self, old: str, new: str | None) -> None:
        """A file found elsewhere (new) or forgotten (None): the page's memory of it follows."""
        if new:
            self.relocated[old] = new
        if old in self.imported:
            self.imported.remove(old)
            if new and new not in self.imported:
                self.imported.append(new)
        for kept in (self.per_model, self._edited):
            if old in kept:
                value = kept.pop(old)
                if new:
                    kept[new] = replace(value, model_path=new) if isinstance(value, LoadOptions) \
                        else {**value, "model_path": new}

    def title(self, info_or_path) -> str:
        """What the window calls a model: its library name with its type (see titles.py)."""
        if isinstance(info_or_path, dict) and info_or_path.get("path") in self.relocated:
            info_or_path = {**info_or_path, "path": self.relocated[info_or_path["path"]]}
        if isinstance(info_or_path, dict) or info_or_path is None:
            return info_title(info_or_path, self.models)
        return path_title(self.relocated.get(info_or_path, info_or_path), self.models)

    def selected_path(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self.models):
            return None
        return self.models[rows[0].row()].get("path")

    def _on_selection_changed(self) -> None:
        path = self.selected_path()
        if self._anyway and self._anyway[0] != path:
            self._arm_anyway(None)
        self._described = path
        self._check_requantize()  # the last model's note goes until this one's header is read
        self.quality.show_for(path)
        self._show_loaded_note()
        if not path or self.missing.show_selection():  # a missing file has nothing to read or fit
            return
        self._show_options_for(path)
        self.load_settings.set_layer_count(None, None)  # the old model's suggestion no longer applies
        self.load_settings.set_trained_context(None)
        self.tasks.run(lambda: manager.inspect(path), lambda info: self._show_details(path, info),
                       lambda msg: self.details.setText(html.escape(msg)), "inspect", latest=True)
        rows = list(self.models)
        self.tasks.run(lambda: manager.draft_candidates(path, rows),
                       lambda found: path == self.selected_path() and self.load_settings.set_draft_choices(found),
                       None, "drafts", latest=True)
        self._update_fit()

    def _show_details(self, path: str, info: dict) -> None:
        if path != self.selected_path():
            return
        self._inspected = (path, info)
        self._check_requantize()
        entry_id = next((m.get("id") for m in self.models if m.get("path") == path), None)
        rows = [("Id", entry_id), ("Architecture", info.get("architecture")),
                ("Parameters", f"{info['parameters'] / 1e6:,.0f} M" if info.get("parameters") else None),
                ("Internal name", info.get("name")),
                ("Quantization", " / ".join(x for x in (info.get("file_type"), info.get("seed_name")) if x)),
                ("Layers", info.get("layers")), ("Heads / KV heads", f"{info.get('heads')} / {info.get('kv_heads')}"),
                ("Trained context", info.get("context_length")), ("Vocabulary", info.get("vocab_size")),
                ("File size", human_size(info.get("file_size", 0))), ("License", info.get("license")),
                ("Path", path)]
        # Zero-width spaces after slashes let a long path wrap instead of widening the page.
        body = "".join(f"<tr><td style='color:#9ca3af; padding-right:12px'>{k}</td>"
                       f"<td>{html.escape(str(v)).replace('/', '/&#8203;')}</td></tr>"
                       for k, v in rows if v not in (None, ""))
        name = html.escape(self.title(path))  # the library's name: general.name is the same for every copy
        self.details.setText(f"<b>{name}</b><table>{body}</table>")
        self.load_settings.set_layer_count(info.get("layers"), self.load_settings.suggested_layers)
        self.load_settings.set_trained_context(info.get("context_length"))

    def _check_requantize(self, *_args) -> None:
        """Whether the chosen model is already quantized, said under the quantize row before anything starts."""
        path = self.selected_path()
        note = ""
        if path and self._inspected and self._inspected[0] == path:
            note = manager.requantize_note(path, self._inspected[1], self.quant_type.currentData())
        self.requant_note.setText(note)
        self.requant_note.setVisible(bool(note))
        self.quantize_button.setText("Quantize anyway" if note else "Quantize")

    def options_for(self, path: str) -> LoadOptions:
        """How `path` loads: the pane's settings when it is the chosen model, else its kept ones."""
        return self.load_settings.options(path) if path == self._shown_for else self.kept_options(path)

    def kept_options(self, path: str) -> LoadOptions:
        """`path`'s own options: changed here this session, else those it was last loaded with, else the
        default load options."""
        if path in self._edited:
            return replace(self._edited[path], model_path=path)
        if path in self.per_model:
            return replace(LoadOptions.from_dict(self.per_model[path]), model_path=path, ignore_fit=False)
        return replace(self.defaults, model_path=path)

    def _show_options_for(self, path: str) -> None:
        if path == self._shown_for:
            return
        if self._shown_for is not None:
            left = self.load_settings.options(self._shown_for)
            if left != self.kept_options(self._shown_for):  # changed and not loaded: kept for when it comes back
                self._edited[self._shown_for] = left
        self._shown_for = path
        self.load_settings.set_options(self.kept_options(path))

    def set_defaults(self, defaults: LoadOptions) -> None:
        """New default load options (Settings): the chosen model shows them if it showed the old ones (it has
        no options of its own, and none changed in the pane)."""
        old, self.defaults = self.defaults, defaults
        path = self._shown_for
        if path is None or path in self._edited or path in self.per_model:
            return
        if self.load_settings.options(path) == replace(old, model_path=path):
            self.load_settings.set_options(replace(defaults, model_path=path))

    def _update_fit(self, *_args) -> None:
        path = self.selected_path()
        if not path:
            return
        n_ctx, kv = self.load_settings.ctx.currentData(), self.load_settings.kv_type.currentText()
        runtime = self.load_settings.runtime.currentData() or "auto"
        draft = self.load_settings.options(path).draft_model  # the load holds it too (#49.2)

        def fits() -> dict:
            verdict = {**manager.fit(path, n_ctx, kv, runtime, draft),
                       "draft_pay": manager.draft_pay(path, draft) if draft else None}
            if draft:  # what the load holds when the draft cannot pay and is left out (#55 D5)
                verdict["without_draft"] = manager.fit(path, n_ctx, kv, runtime, None)
            return verdict

        self.tasks.run(fits, self._show_fit, self.fit_label.setText, "fit", latest=True)

    def _show_fit(self, verdict: dict | None = None) -> None:
        """The fit of what Load would load: with the draft, or without it when the draft cannot pay and "Load it
        anyway" is not ticked (it counted a draft that would not load)."""
        verdict = verdict if verdict is not None else self._fit_shown
        if verdict is None:
            return
        path = self.selected_path()
        if verdict.get("model") != path or verdict.get("draft_model") != self.load_settings.options(path).draft_model:
            return  # an answer for a model (or a draft) the user has since left: the newer answer follows
        self._fit_shown = verdict
        self.load_settings.show_draft_verdict(verdict.get("draft_pay"))  # before Load, whether the draft can pay
        if verdict.get("without_draft") and not self.load_settings.load_options(path).draft_model:
            verdict = {**verdict["without_draft"], "draft_pay": verdict.get("draft_pay")}
        if verdict.get("model") in self.failed:  # memory would fit, but the file itself did not load
            self.fit_label.setText("<span style='color:#ef4444'>This file did not load: "
                                   f"{html.escape(self.failed[verdict['model']])}</span>")
            self.fit_label.setToolTip("")
            return
        self.quality.set_fit(verdict)
        color = "#10b981" if verdict["fits"] else "#ef4444"
        self.fit_label.setText(f"<span style='color:{color}'>{html.escape(verdict['verdict'])}</span>")
        self.fit_label.setToolTip("\n".join(verdict.get("hints") or []))
        self.load_settings.set_layer_count(verdict.get("n_layers"), verdict.get("gpu_layers"))

    # --- loading -----------------------------------------------------------------
    def load_selected(self) -> None:
        path = self.selected_path()
        if not path:
            self.show_error("Choose a model in the library first.")
            return
        options = self.load_settings.load_options(path)
        options.ignore_fit = self._anyway == (path, options.n_ctx, options.kv_type)
        self._arm_anyway(None)
        self.load_requested.emit(options)

    def _on_load_failed(self, message: str) -> None:
        self._set_loading(False)
        failed = self.bridge.failed_options
        if self.bridge.load_error_kind is ErrorKind.MODEL_TOO_BIG and failed is not None:
            # The verdict is on screen; a second click on the same model and settings loads it anyway.
            self._arm_anyway((failed.model_path, failed.n_ctx, failed.kv_type))
        elif failed is not None and not self.bridge.remote:
            self.failed[failed.model_path] = message
            self._mark_rows()
            self._update_fit()
        if failed is not None and not self.bridge.remote:
            # Kept on screen when the model before comes back: "Loaded X" must not read as the failed file.
            self._failure = (failed.model_path, message)

    def _arm_anyway(self, target: tuple | None) -> None:
        self._anyway = target
        self.load_button.setText("Load anyway" if target else "Load model")

    def _set_loading(self, loading: bool) -> None:
        self.load_button.setEnabled(not loading and self.missing.selected() is None)
        self.cancel_button.setEnabled(loading)

    def cancel_load(self) -> None:
        if self.bridge.loading and self.bridge.options is not None:
            self._cancelled = Path(self.bridge.options.model_path).name
            self.bridge.cancel_load()
            self._set_loading(False)
            self.status.setText(f"Loading {self._cancelled} was cancelled.")

    def _on_model_loading(self, options: LoadOptions) -> None:
        self._set_loading(True)
        if self._failure is not None and not self.bridge.remote:  # the model before coming back
            self.status.setText(f"<span style='color:#ef4444'>{html.escape(self._failure[1])}</span><br>"
                                f"Loading {html.escape(self.title(options.model_path))} again…")
            return
        self.status.setText("Connecting to the server…" if self.bridge.remote
                            else f"Loading {html.escape(self.title(options.model_path))}…")

    def forget_failure(self) -> None:
        """The user asked for a load: the last failure has been read (its file stays marked)."""
        self._failure = None

    def _on_load_progress(self, fraction: float) -> None:
        if self.bridge.options is not None and self._failure is None:
            self.status.setText(f"Loading {Path(self.bridge.options.model_path).name}… {100 * fraction:.0f}%")

    def _on_model_loaded(self, info: dict) -> None:
        self._set_loading(False)
        if info.get("remote"):
            self.speculation.hide()  # the server decides its own speculation
            self._show_loaded_note()  # and its own chat format and devices: nothing to say here
            self.status.setText(f"The window chats with {model_title(info)} on {info['endpoint']}; "
                                "loading a model here switches back to this computer.")
            return
        if self.bridge.options is not None and info.get("path"):  # the options this model loads with next time
            self.per_model[info["path"]] = replace(self.bridge.options, ignore_fit=False).to_dict()
            self._edited.pop(info["path"], None)
        text = loaded_text(info)
        self.speculation.setText(f"Loaded model: {text}" if text else "")
        self.speculation.setVisible(bool(text))
        self._show_loaded_note()
        self.failed.pop(info.get("path"), None)
        self._mark_rows()
        self._update_fit()
        title = html.escape(self.title(info))
        if self._failure is not None and self._failure[0] != info.get("path"):
            self.status.setText(f"<span style='color:#ef4444'>{html.escape(self._failure[1])}</span><br>"
                                f"{title} is loaded.")
            return
        self._failure = None
        text = f"Loaded {title} in {info.get('load_s') or 0:.1f} s."
        if self._cancelled:
            text = f"Loading {html.escape(self._cancelled)} was cancelled; the model before it is back. {text}"
            self._cancelled = None
        self.status.setText(text)

    def _show_loaded_note(self, *_args) -> None:
        """What the engine decided for the loaded model (chat format, where it runs), shown with its details."""
        info = self.bridge.info if self.bridge.ready and not self.bridge.remote else None
        note = ""
        if info and info.get("path") and info["path"] == self.selected_path():
            where = placement_text(info)
            note = " ".join(x for x in (format_text(info), f"Runs on {where}." if where else "",
                                        (info.get("runtime") or {}).get("note") or "") if x)
        self.loaded_note.setText(note)
        self.loaded_note.setVisible(bool(note))

    def _said_plainly(self, message: str, cause: str = "models") -> None:
        self.status.setText(html.escape(message))
        self.noticed.emit(Notice(message, INFO, cause))

    def show_error(self, message: str, cause: str = "models") -> None:
        """The sentence in red under the library, and on the status bar under its cause: the next outcome of the
        same cause ("models.import": a good import) replaces it there."""
        self.status.setText(f"<span style='color:#ef4444'>{html.escape(message)}</span>")
        self.noticed.emit(Notice(message, ERROR, cause))

    # --- import / download ---------------------------------------------------------
    def _on_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", "", "GGUF models (*.gguf)")
        if path:
            self.import_file(path)

    def import_file(self, path: str) -> None:
        def done(entry):
            if path not in self.imported:
                self.imported.append(path)
            # Said and selected, so the user sees where the file went (it used to join the table silently).
            self._select_after_refresh = entry.get("path") or path
            self.sources.setCurrentIndex(0)
            # In place of a failed import's error (#49.14).
            self._said_plainly(f"Imported {Path(path).name}; it is selected in the library.", "models.import")
            self.refresh()

        self.tasks.run(lambda: manager.import_model(path), done, lambda m: self.show_error(m, "models.import"),
                       "import")

    def _on_delete(self) -> None:
        path = self.selected_path()
        if not path:
            return
        if self.missing.selected() is not None:
            self.missing.remove()
        elif self.bridge.options is not None and self.bridge.options.model_path == path:
            self.show_error("This model is loaded; load another one before deleting it.")
        else:
            self.tasks.run(lambda: manager.plan_removal(path), self._confirm_delete, self.show_error, "delete")

    def _confirm_delete(self, removal) -> None:
        """Says exactly what will go (the files and their size, or only the link) before anything does."""
        path = removal.entry.path
        answer = QMessageBox.question(self, "Delete model", f"{removal.describe()}\n\nGo ahead?")
        if answer == QMessageBox.Yes:
            if path in self.imported:
                self.imported.remove(path)
            self.tasks.run(lambda: manager.remove_model(removal), lambda _r: self.refresh(), self.show_error,
                           "delete")

    # --- jobs: download, quantize, convert --------------------------------------------
    def _on_source_tab_changed(self, index: int) -> None:
        if self.sources.widget(index) is self.hub and self.hub.tree.topLevelItemCount() == 0:
            self.hub.search()  # the recommended list, the first time the tab opens

    def download(self, repo_id: str, filename: str | None) -> bool:
        title = f"Downloading {filename or repo_id}"
        return self.jobs.start("download", title, lambda report, cancel: manager.pull(repo_id, filename, report,
                                                                                      cancel))

    def quantize_selected(self) -> bool:
        path = self.selected_path()
        if not path:
            self.show_error("Choose a model in the library first.")
            return False
        qtype = self.quant_type.currentData()
        return self.jobs.start("quantize", f"Quantizing {Path(path).name} to {qtype}",
                               lambda report, cancel: manager.quantize(path, qtype, report, cancel))

    def convert(self, source: str, outtype: str, quantize_to: str | None) -> bool:
        def work(report, cancel):
            return manager.convert(source, outtype, quantize_to, lambda stage, d, t: report(d, t, stage), cancel)

        return self.jobs.start("convert", f"Converting {Path(source).name}", work)

    def measure_quality(self, path: str, text: str) -> bool:
        return self.jobs.start("measure", f"Measuring the quants of {Path(path).name} on {Path(text).name}",
                               lambda report, cancel: manager.measure_quality(path, text, report, cancel))

    def _on_job_finished(self, kind: str, path: str) -> None:
        if kind == "measure":
            self.status.setText(f"Measured the quants of {html.escape(Path(path).name)}.")
            self.quality.show_for(self.selected_path())
            return
        verb = {"download": "Downloaded", "quantize": "Quantized", "convert": "Converted"}.get(kind, "Made")
        self.status.setText(f"{verb} {html.escape(Path(path).name)}; it is in the library.")
        self._select_after_refresh = path
        self.sources.setCurrentIndex(0)
        self.refresh()
        self.library_changed.emit(path)

    def settings_to_save(self) -> dict:
        return {"imported_models": self.imported, "model_load_options": self.per_model}

    def close_tasks(self) -> None:
        self.jobs.cancel()  # a quantizer or converter child must not outlive the window
        self.tasks.close()
