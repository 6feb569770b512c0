"""The message box: Enter sends and Shift+Enter makes a new line, as in LM Studio, Jan and GPT4All."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtWidgets import QPlainTextEdit


class PromptEdit(QPlainTextEdit):
    """The message box: Enter sends and Shift+Enter makes a new line, as in LM Studio, Jan and GPT4All;
    with enter_sends off (Settings), Enter makes a new line. Ctrl+Enter always sends."""

    submitted = Signal()
    image_pasted = Signal(object)  # a QImage pasted from the clipboard (#53): attached, not written as text
    files_pasted = Signal(list)  # local files pasted (a file manager's Copy): attached, not their paths as text

    def __init__(self, parent=None):
        super().__init__(parent)
        self.enter_sends = True
        # Tab moves on to Send, the chat list and the sampling boxes, as in a form (#49.12): a tab character in a
        # message is rare, and a keyboard-only user had no way out but Shift+Tab. Ctrl+Tab still leaves too.
        self.setTabChangesFocus(True)

    def set_enter_sends(self, on: bool) -> None:
        self.enter_sends = on
        self.setPlaceholderText("Message the model. " + ("Enter sends, Shift+Enter adds a line" if on else
                                                         "Ctrl+Enter sends, Enter adds a line") + ", Esc stops.")

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 (Qt's name)
        return source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 (Qt's name)
        files = [u.toLocalFile() for u in source.urls() if u.isLocalFile()] if source.hasUrls() else []
        if files:
            self.files_pasted.emit(files)
        elif source.hasImage():
            self.image_pasted.emit(source.imageData())
        else:
            super().insertFromMimeData(source)

    def keyPressEvent(self, event):
        if event.key() in (Qt.Key_Return, Qt.Key_Enter):
            mods = event.modifiers()
            if mods & Qt.ControlModifier or (self.enter_sends and not mods & (Qt.ShiftModifier | Qt.AltModifier)):
                self.submitted.emit()
                return
            if self.enter_sends:  # Shift+Enter: a plain new line, not Qt's line separator
                self.insertPlainText("\n")
                return
        super().keyPressEvent(event)


# An answer drafted from the old one is judged on its speed only from this length on: a few tokens' speed is noise.
JUDGED_TOKENS = 32
