"""Settings: theme, the send key, the load settings' defaults, and where Hearth keeps its data.

Load options themselves are set on the Models page, which remembers the last ones used; here they can be
put back to Hearth's defaults."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel,
                               QPushButton, QWidget)

from app.core import paths
from app.core.settings import THEMES

SEND_KEYS = {True: "Enter sends, Shift+Enter adds a line", False: "Ctrl+Enter sends, Enter adds a line"}


class SettingsDialog(QDialog):
    def __init__(self, settings: dict, parent=None):
        super().__init__(parent)
        self.reset_load = False  # the user asked for the default load settings
        self.setWindowTitle("Settings")
        self.theme = QComboBox()
        for theme in THEMES:
            self.theme.addItem({"system": "Follow the system"}.get(theme, theme.capitalize()), theme)
        self.theme.setCurrentIndex(max(0, self.theme.findData(settings.get("theme", "system"))))
        self.send_key = QComboBox()
        for enter_sends, text in SEND_KEYS.items():
            self.send_key.addItem(text, enter_sends)
        self.send_key.setCurrentIndex(self.send_key.findData(settings.get("enter_sends", True)))
        folder = paths.data_dir()
        where = QLabel(str(folder))
        where.setWordWrap(True)
        where.setToolTip("Chats, settings and downloaded models; set HEARTH_HOME before starting Hearth to "
                         "keep them elsewhere")
        open_button = QPushButton("Open")
        open_button.clicked.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))))
        data_row = QWidget()
        row = QHBoxLayout(data_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(where, 1)
        row.addWidget(open_button)
        self.reset_button = QPushButton("Reset to defaults")
        self.reset_button.setToolTip("Put the Models page's load settings (context, threads, KV type, "
                                     "speculation, …) back to Hearth's defaults for the next load")
        self.reset_note = QLabel("The Models page remembers the last settings used.")
        self.reset_note.setWordWrap(True)
        self.reset_button.clicked.connect(self._on_reset_clicked)
        load_row = QWidget()
        row = QHBoxLayout(load_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.reset_note, 1)
        row.addWidget(self.reset_button)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("Theme", self.theme)
        form.addRow("Send key", self.send_key)
        form.addRow("Load settings", load_row)
        form.addRow("Data folder", data_row)
        form.addRow(buttons)

    def _on_reset_clicked(self) -> None:
        self.reset_load = True
        self.reset_note.setText("The defaults will be set when you press OK.")

    def values(self) -> dict:
        return {"theme": self.theme.currentData(), "enter_sends": self.send_key.currentData(),
                "reset_load_settings": self.reset_load}
