"""The model picker at the top of the chat: which model answers, Load another, Eject it (as LM Studio,
Jan and GPT4All put it above the conversation).

While the window chats with a server (Connections), the picker shows that server's model, first in the
box, and Load stays off until a model of this computer's library is chosen (loading it leaves the server)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QLabel, QSizePolicy, QStyle, QStyleOptionComboBox, QStylePainter, QWidget

from app.ui.models.titles import row_title
from app.ui.widgets import ElidedLabel, button, hbox


def tools_badge(info: dict | None) -> tuple[str, str]:
    """(badge, tooltip) for whether the loaded model was trained for tools, as LM Studio's badge says it: its
    chat template takes them (app/engine/prompt/template.py, knows_tools). ("", "") where that is not known (no model,
    or a server's model, whose template Hearth does not see)."""
    if not info or info.get("knows_tools") is None:
        return "", ""
    if info["knows_tools"]:
        return "Trained for tools", ("Its chat template knows tools: the model was trained to call them, and gets "
                                     "them the way it was trained (Tools page, and the chat's Tools box)")
    return "Not trained for tools", ("Its chat template knows no tools: they are described in the system prompt "
                                     "instead, and a grammar keeps its calls well-formed; a model not trained for "
                                     "them calls them poorly")


class ElidedComboBox(QComboBox):
    """A combo box whose shown name loses its middle to "…" when the box is narrower (Qt cut it: "SmolLM2-135M-I"):
    a model's name and its quantization are at its two ends, so both stay (#55 F: "Meta-Llama-…" hid the quant)."""

    def paintEvent(self, _event) -> None:
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.CC_ComboBox, option)
        field = self.style().subControlRect(QStyle.CC_ComboBox, option, QStyle.SC_ComboBoxEditField, self)
        option.currentText = self.fontMetrics().elidedText(option.currentText, Qt.ElideMiddle, field.width())
        painter.drawControl(QStyle.CE_ComboBoxLabel, option)


class _Badge(ElidedLabel):
    """The tools badge: a pill while it has room for its text (or its "…"), nothing at all when squeezed to a
    sliver (an empty pill's border was left beside Eject at 1024 px). Decided by its width alone, which its
    style does not change, so restyling cannot feed back into the layout."""

    ROOM = 24  # pixels: below this not even "…" fits inside the pill's padding

    pill = ""

    def set_pill(self, css: str) -> None:
        self.pill = css
        self._restyle()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._restyle()

    def _restyle(self) -> None:
        css = self.pill if self.width() >= self.ROOM else ""
        if self.styleSheet() != css:
            self.setStyleSheet(css)


class ModelPicker(QWidget):
    load_requested = Signal(str)  # a library path
    eject_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.combo = ElidedComboBox()
        self.combo.setAccessibleName("Model")
        self.combo.setToolTip("The library's models; Load puts the chosen one in memory with its own load "
                              "settings (Models page), or the default ones (Settings) for a model not loaded "
                              "before")
        self.combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(8)  # long names elide instead of widening the chat page
        self.combo.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.load_button = button("Load", self._on_load_clicked)
        self.eject_button = button("Eject", self.eject_requested, "Let go of the model and free its memory")
        # A state ("no model loaded", "loading…") takes room the row has: it must not set the page's minimum
        # width, which at 1024 pixels pushed the window past the screen and squeezed the monitor.
        self.state = ElidedLabel(shortest=0)
        self.state.setObjectName("hint")
        # Elided to the room left, down to nothing: at its whole width (142 px) beside the picker it made the chat
        # page too wide for a 1024-px screen with a model loaded (the window went to 1138 px). Its tooltip, and
        # the Tools page, say it in full.
        self.simple = False  # the simple window leaves the tools badge out (app/ui/shell/window_mode.py)
        self.tools_badge = _Badge("", shortest=0)
        self.tools_badge.setObjectName("toolsBadge")
        self.tools_badge.hide()
        hbox(QLabel("Model"), (self.combo, 1), self.load_button, self.eject_button, self.tools_badge, self.state,
             parent=self, margin=0)
        self.loaded_path: str | None = None
        self.busy = False
        self.remote_title = ""  # the server's model, shown first in the box while the window chats with it
        self.combo.currentIndexChanged.connect(self._update)
        self._update()

    def set_models(self, rows: list[dict]) -> None:
        on_remote = self._remote_shown() and self.combo.currentIndex() == 0
        chosen = self.combo.currentData() or self.loaded_path
        self.combo.blockSignals(True)
        self.combo.clear()
        if self.remote_title:
            self.combo.addItem(self.remote_title, None)
        for row in rows:
            if row.get("error") and not (row.get("missing") and row.get("path") == self.loaded_path):
                continue  # a file the library cannot read is for the Models page to explain (the loaded one named)
            self.combo.addItem(row_title(row), row.get("path"))
            self.combo.setItemData(self.combo.count() - 1, row.get("path"), 3)  # the path as its tooltip
        index = 0 if on_remote or (self.remote_title and not chosen) else self.combo.findData(chosen) if chosen else -1
        self.combo.setCurrentIndex(index if index >= 0 else -1)
        self.combo.blockSignals(False)
        self._update()

    def _remote_shown(self) -> bool:
        return self.combo.count() > 0 and self.combo.itemData(0) is None and bool(self.remote_title)

    def show_state(self, loaded_path: str | None, busy: bool, remote: bool = False, remote_title: str = "") -> None:
        """The loaded model (chosen in the box), and whether a load is under way; remote_title: the server's
        model that the window chats with instead (or that it is connecting to)."""
        self.loaded_path = loaded_path
        self.busy = busy
        title = remote_title if remote else ""
        if title != self.remote_title:
            self.combo.blockSignals(True)
            if self._remote_shown():
                self.combo.removeItem(0)
            self.remote_title = title
            if title:
                self.combo.insertItem(0, title, None)
                self.combo.setItemData(0, "The model on the server this window chats with (Connections)", 3)
                self.combo.setCurrentIndex(0)
            self.combo.blockSignals(False)
        if loaded_path:
            index = self.combo.findData(loaded_path)
            if index >= 0:
                self.combo.setCurrentIndex(index)
        self.state.setText("loading…" if busy else "" if loaded_path or remote else "no model loaded")
        self.state.setVisible(bool(self.state.text()))  # no empty label taking width from the chat
        self.setToolTip("The window chats with a server (Connections); loading here comes back to this computer"
                        if remote else "")
        self._update()

    def show_tools_badge(self, info: dict | None) -> None:
        text, tip = tools_badge(info)
        trained = bool(info and info.get("knows_tools"))
        self.tools_badge.setText(text)
        self.tools_badge.setToolTip(tip)
        # A pill, green when trained: the same mark as the Tools page's line (elided where the row is short).
        self.tools_badge.set_pill(f"QLabel {{ border: 1px solid {'#10b981' if trained else '#9ca3af'}; "
                                  f"border-radius: 8px; padding: 1px 6px; color: "
                                  f"{'#10b981' if trained else '#6b7280'}; }}")
        self.tools_badge.setVisible(bool(text) and not self.simple)

    def _update(self, *_args) -> None:
        chosen = self.combo.currentData()
        self.load_button.setEnabled(bool(chosen) and chosen != self.loaded_path and not self.busy)
        self.eject_button.setEnabled(bool(self.loaded_path) and not self.busy)

    def _on_load_clicked(self) -> None:
        if self.combo.currentData():
            self.load_requested.emit(self.combo.currentData())
