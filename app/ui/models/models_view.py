"""The Models page: the library, a model's details and fit verdict, load settings, import and download."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QFileDialog, QGroupBox, QHBoxLayout, QHeaderView, QLabel,
                               QMessageBox, QPushButton, QScrollArea, QSplitter, QTableWidget, QTableWidgetItem, QVBoxLayout,
                               QWidget)

from app.engine.protocol import LoadOptions
from app.ui.engine_bridge import EngineBridge
from app.ui.models import manager
from app.ui.models.load_settings import LoadSettings
from app.ui.worker import Tasks

COLUMNS = ["Name", "Type", "Size", "Source"]


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1024
    return ""


class ModelsView(QWidget):
    load_requested = Signal(object)  # LoadOptions

    def __init__(self, bridge: EngineBridge, settings: dict, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.imported: list[str] = [p for p in settings.get("imported_models", []) if isinstance(p, str)]
        self.tasks = Tasks(self)
        self.models: list[dict] = []

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.import_button = QPushButton("Import…")
        self.refresh_button = QPushButton("Refresh")
        self.delete_button = QPushButton("Delete")
        self.delete_button.setToolTip("Delete a model Hearth downloaded or made; imported files are only forgotten")
        lib_box = QGroupBox("Library")
        lib_layout = QVBoxLayout(lib_box)
        lib_layout.addWidget(self.table, 1)
        row = QHBoxLayout()
        row.addWidget(self.import_button)
        row.addWidget(self.refresh_button)
        row.addStretch(1)
        row.addWidget(self.delete_button)
        lib_layout.addLayout(row)
        self.download_box = QGroupBox("Search and download")
        dl_layout = QVBoxLayout(self.download_box)
        self.download_note = QLabel()
        self.download_note.setWordWrap(True)
        dl_layout.addWidget(self.download_note)

        self.details = QLabel("Choose a model to see its details.")
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.RichText)
        self.details.setAlignment(Qt.AlignTop | Qt.AlignLeft)
        self.details.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.fit_label = QLabel()
        self.fit_label.setWordWrap(True)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.load_settings = LoadSettings()
        last = settings.get("load_options")
        if isinstance(last, dict):
            self.load_settings.set_options(LoadOptions.from_dict(last))
        self.load_button = QPushButton("Load model")
        self.load_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel loading")
        self.cancel_button.setEnabled(False)

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(lib_box, 3)
        left_layout.addWidget(self.download_box, 1)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        details_box = QGroupBox("Details")
        QVBoxLayout(details_box).addWidget(self.details)
        settings_box = QGroupBox("Load settings")
        sl = QVBoxLayout(settings_box)
        sl.addWidget(self.load_settings)
        right_layout.addWidget(details_box)
        right_layout.addWidget(self.fit_label)
        right_layout.addWidget(settings_box)
        buttons = QHBoxLayout()
        buttons.addWidget(self.status, 1)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.load_button)
        right_layout.addLayout(buttons)
        right_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        scroll.setWidget(right)
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(scroll)
        splitter.setSizes([400, 620])
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(splitter)

        self.table.itemSelectionChanged.connect(self._on_selection_changed)
        self.load_button.clicked.connect(self.load_selected)
        self.cancel_button.clicked.connect(self.bridge.cancel_load)
        self.import_button.clicked.connect(self._on_import)
        self.refresh_button.clicked.connect(self.refresh)
        self.delete_button.clicked.connect(self._on_delete)
        self.load_settings.ctx.currentIndexChanged.connect(self._update_fit)
        self.load_settings.kv_type.currentIndexChanged.connect(self._update_fit)
        bridge.model_loading.connect(self._on_model_loading)
        bridge.model_loaded.connect(self._on_model_loaded)
        bridge.load_failed.connect(lambda _m: self._set_loading(False))
        self._update_download_note()
        self.refresh()

    # --- library -----------------------------------------------------------------
    def refresh(self) -> None:
        extra = list(self.imported)
        self.tasks.run(lambda: manager.list_models(extra), self._on_models_listed, self.show_error, "library")

    def _on_models_listed(self, models: list[dict]) -> None:
        current = self.selected_path()
        self.models = models
        self.table.setRowCount(len(models))
        for row, m in enumerate(models):
            values = [m.get("name", ""), m.get("quant", "?"), human_size(m.get("size_bytes", 0) or 0),
                      m.get("source", "")]
            for col, value in enumerate(values):
                item = QTableWidgetItem(str(value))
                item.setToolTip(m.get("path", ""))
                self.table.setItem(row, col, item)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        paths = [m.get("path") for m in models]
        target = current or (self.bridge.options.model_path if self.bridge.options else None)
        if target in paths:
            self.table.selectRow(paths.index(target))
        elif models:
            self.table.selectRow(0)

    def selected_path(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self.models):
            return None
        return self.models[rows[0].row()].get("path")

    def _on_selection_changed(self) -> None:
        path = self.selected_path()
        if not path:
            return
        self.tasks.run(lambda: manager.inspect(path), lambda info: self._show_details(path, info),
                       lambda msg: self.details.setText(html.escape(msg)), "inspect")
        self._update_fit()

    def _show_details(self, path: str, info: dict) -> None:
        if path != self.selected_path():
            return
        rows = [("Architecture", info.get("architecture")),
                ("Parameters", f"{info['parameters'] / 1e6:,.0f} M" if info.get("parameters") else None),
                ("Quantization", " / ".join(x for x in (info.get("file_type"), info.get("seed_name")) if x)),
                ("Layers", info.get("layers")), ("Heads / KV heads", f"{info.get('heads')} / {info.get('kv_heads')}"),
                ("Trained context", info.get("context_length")), ("Vocabulary", info.get("vocab_size")),
                ("File size", human_size(info.get("file_size", 0))), ("License", info.get("license")),
                ("Path", path)]
        # Zero-width spaces after slashes let a long path wrap instead of widening the page.
        body = "".join(f"<tr><td style='color:#9ca3af; padding-right:12px'>{k}</td>"
                       f"<td>{html.escape(str(v)).replace('/', '/&#8203;')}</td></tr>"
                       for k, v in rows if v not in (None, ""))
        name = html.escape(info.get("name") or Path(path).stem)
        self.details.setText(f"<b>{name}</b><table>{body}</table>")
        self.load_settings.set_layer_count(info.get("layers"))

    def _update_fit(self, *_args) -> None:
        path = self.selected_path()
        if not path:
            return
        if not manager.available("fit"):
            self.fit_label.setText("")
            return
        n_ctx, kv = self.load_settings.ctx.currentData(), self.load_settings.kv_type.currentText()
        self.tasks.run(lambda: manager.fit(path, n_ctx, kv), self._show_fit, self.fit_label.setText, "fit")

    def _show_fit(self, verdict: dict | None) -> None:
        if not verdict:
            self.fit_label.setText("")
            return
        text = verdict.get("verdict") or verdict.get("message") or ""
        fits = verdict.get("fits", True)
        color = "#10b981" if fits else "#ef4444"
        self.fit_label.setText(f"<span style='color:{color}'>{html.escape(str(text))}</span>")
        suggested = verdict.get("suggested_gpu_layers")
        if suggested is not None:
            self.load_settings.set_layer_count(verdict.get("n_layers"), suggested)

    # --- loading -----------------------------------------------------------------
    def load_selected(self) -> None:
        path = self.selected_path()
        if not path:
            self.show_error("Choose a model in the library first.")
            return
        self.load_requested.emit(self.load_settings.options(path))

    def _set_loading(self, loading: bool) -> None:
        self.load_button.setEnabled(not loading)
        self.cancel_button.setEnabled(loading)

    def _on_model_loading(self, options: LoadOptions) -> None:
        self._set_loading(True)
        self.status.setText(f"Loading {Path(options.model_path).name}…")

    def _on_model_loaded(self, info: dict) -> None:
        self._set_loading(False)
        self.status.setText(f"Loaded {info.get('name') or info.get('model')} in {info.get('load_s', 0):.1f} s.")

    def show_error(self, message: str) -> None:
        self.status.setText(f"<span style='color:#ef4444'>{html.escape(message)}</span>")

    # --- import / download ---------------------------------------------------------
    def _on_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", "", "GGUF models (*.gguf)")
        if path:
            self.import_file(path)

    def import_file(self, path: str) -> None:
        def done(entry):
            if entry is None and path not in self.imported:  # no library module: remember it here
                self.imported.append(path)
            self.refresh()

        self.tasks.run(lambda: manager.import_model(path), done, self.show_error, "import")

    def _on_delete(self) -> None:
        path = self.selected_path()
        if not path:
            return
        if self.bridge.options is not None and self.bridge.options.model_path == path:
            self.show_error("This model is loaded; load another one before deleting it.")
            return
        answer = QMessageBox.question(self, "Delete model", f"Remove {Path(path).name} from the library?")
        if answer == QMessageBox.Yes:
            if path in self.imported:
                self.imported.remove(path)
            self.tasks.run(lambda: manager.remove_model(path), lambda _r: self.refresh(), self.show_error, "delete")

    def _update_download_note(self) -> None:
        if manager.available("hub"):
            self.download_note.setText("Search Hugging Face for GGUF models.")
        else:
            self.download_note.setText("Searching and downloading models needs the model manager's hub module, "
                                       "which is not part of this build yet.")

    def settings_to_save(self) -> dict:
        return {"imported_models": self.imported}

    def close_tasks(self) -> None:
        self.tasks.join()
