"""Settings: theme, the send key, the default load options, and where Hearth keeps its data.

The default load options are what the Models page shows for a model not loaded before (a model that was
loaded keeps the options it was last loaded with). Each can be set on its own and put back to Hearth's
default with the button beside it; only those that differ from Hearth's are kept in the settings file, so
a later Hearth with better defaults still reaches the user who never changed them."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QWidget

from app.core import paths
from app.ui.settings import shape
from app.ui.settings.shape import THEMES
from app.protocol.messages import LoadOptions
from app.ui.models.load_settings import DEFAULTABLE, LoadSettings, defaults_changed
from app.ui.shell import window_mode
from app.ui.widgets.clamped_spin import ClampingDoubleSpinBox, ClampingSpinBox
from app.ui.widgets import STRETCH, VerticalScroll, button, combo, group, hbox, vbox, wrapped

SEND_KEYS = {True: "Enter sends, Shift+Enter adds a line", False: "Ctrl+Enter sends, Enter adds a line"}


def default_load_options(settings: dict, problems: list[str] | None = None) -> LoadOptions:
    """The default load options kept in the settings (Hearth's own where none was set)."""
    chosen = {k: v for k, v in shape.value(settings, "load_defaults").items() if k in DEFAULTABLE}
    return LoadOptions.from_dict(chosen, problems)


class SettingsDialog(QDialog):
    def __init__(self, settings: dict, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.theme = combo({theme: {"system": "Follow the system"}.get(theme, theme.capitalize()) for theme in THEMES})
        self.theme.setCurrentIndex(max(0, self.theme.findData(shape.value(settings, "theme"))))
        self.window_mode = combo(window_mode.MODES)  # simple or full (app/ui/shell/window_mode.py)
        self.window_mode.setCurrentIndex(max(0, self.window_mode.findData(window_mode.chosen(settings))))
        self.window_mode.setToolTip("Simple: your chats and the model, sampling as one choice. Full: every setting, "
                                    "the live graphs and the pages for developers")
        self.send_key = combo(SEND_KEYS)
        self.send_key.setCurrentIndex(self.send_key.findData(shape.value(settings, "enter_sends")))
        folder = paths.data_dir()
        where = wrapped(str(folder))
        where.setToolTip("Chats, settings and downloaded models; set HEARTH_HOME before starting Hearth to "
                         "keep them elsewhere")
        open_button = button("Open", lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))))
        data_row = QWidget()
        hbox((where, 1), open_button, parent=data_row, margin=0)

        self.load_defaults = LoadSettings(defaults=True)
        self.load_defaults.set_options(default_load_options(settings))
        self.reset_button = button("All to Hearth's defaults",
                                   lambda: self.load_defaults.reset_to_hearth(tuple(DEFAULTABLE)),
                                   "Put every default load option back to Hearth's own")
        note = wrapped("Used for a model you have not loaded before; a model you loaded keeps the options it was "
                       "last loaded with (Models page). The button beside an option puts it back to Hearth's "
                       "default.", "hint")
        box = group("Default load options", note, self.load_defaults, hbox(STRETCH, self.reset_button))

        top = QWidget()
        form = QFormLayout(top)
        form.addRow("Window", self.window_mode)
        form.addRow("Theme", self.theme)
        form.addRow("Send key", self.send_key)
        form.addRow("Data folder", data_row)
        form.addRow(box)
        # The load options make the dialog tall: it scrolls on a small screen instead of leaving it.
        scroll = VerticalScroll(top)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        # A typed value out of range is clamped and said here, on a line that stays (#55 E4: the box's balloon went
        # with the focus, and the dialog had no status bar to say it).
        self.clamped = wrapped(color="#d97706")
        self.clamped.hide()
        vbox((scroll, 1), self.clamped, buttons, parent=self)
        for kind in (ClampingSpinBox, ClampingDoubleSpinBox):  # once the boxes are the dialog's
            for spin in self.findChildren(kind):
                spin.clamped.connect(self._say_clamped)
        self.resize(max(520, self.sizeHint().width()), 620)

    def _say_clamped(self, sentence: str) -> None:
        self.clamped.setText(sentence)
        self.clamped.show()

    def values(self) -> dict:
        return {"theme": self.theme.currentData(), "enter_sends": self.send_key.currentData(),
                window_mode.SETTING: self.window_mode.currentData(),
                "load_defaults": defaults_changed(self.load_defaults.options(""))}
