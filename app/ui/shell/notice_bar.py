"""The window's status bar as the view of one NoticeBoard (app.ui.widgets.notices): every sentence it shows is a
notice with a severity, a cause and a lifetime.

QStatusBar's own message painted the text cut at the bar's edge, mid-word and without an ellipsis
("...possibly for lack of memc", #49.14); here the newest notice is an elided label with the whole text on
hover, and a click opens it whole in a box whose text can be selected (a crash log's path, an error to
quote). showMessage, currentMessage and clearMessage are kept and go through the board too, so no caller
can bypass it.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QMessageBox, QStatusBar

from app.ui.widgets.notices import ERROR, INFO, WARNING, Notice, NoticeBoard
from app.ui.widgets import ElidedLabel

# Readable on the light and the dark palette alike; INFO keeps the palette's own text colour.
SEVERITY_COLOURS = {WARNING: "#d97706", ERROR: "#ef4444"}
SEVERITY_MARKS = {WARNING: "Warning", ERROR: "Error"}  # said in the tooltip, for who cannot tell the colours


class NoticeLabel(ElidedLabel):
    clicked = Signal()

    def mouseReleaseEvent(self, event) -> None:
        if event.button() == Qt.LeftButton and self.text():
            self.clicked.emit()
        super().mouseReleaseEvent(event)


class NoticeBar(QStatusBar):
    notice_shown = Signal(object)  # the Notice now on the bar, or None

    def __init__(self, parent=None, board: NoticeBoard | None = None):
        super().__init__(parent)
        self.board = board or NoticeBoard()
        self.label = NoticeLabel("", shortest=120)
        self.label.setObjectName("notice")
        self.label.setContentsMargins(6, 0, 6, 0)
        self.label.setCursor(Qt.PointingHandCursor)
        self.label.clicked.connect(self.show_whole)
        self.addWidget(self.label, 1)  # the left, stretching part; the permanent labels keep the right
        self._expiry = QTimer(self, singleShot=True, timeout=self._refresh)
        self.box: QMessageBox | None = None  # the last notice opened whole (tests read it)
        self.board.add_listener(self._refresh)
        self._shown: Notice | None = None

    # --- posting ----------------------------------------------------------------------
    def clear(self, cause: str) -> None:
        self.board.clear(cause)

    def notice(self) -> Notice | None:
        return self.board.current()

    # QStatusBar's API, through the board: a message with a timeout is a passing INFO notice.
    def showMessage(self, text: str, timeout: int = 0) -> None:  # noqa: N802 (Qt's name)
        self.board.post(Notice(text, INFO, "", timeout / 1000 if timeout else "default"))

    def currentMessage(self) -> str:  # noqa: N802
        current = self.board.current()
        return current.text if current else ""

    def clearMessage(self) -> None:  # noqa: N802
        self.board.clear_all_passing()

    # --- showing ----------------------------------------------------------------------
    def _refresh(self) -> None:
        current = self.board.current()
        if current != self._shown:
            self._shown = current
            self.label.setText(current.text if current else "")
            colour = SEVERITY_COLOURS.get(current.severity) if current else None
            self.label.setStyleSheet(f"color: {colour}" if colour else "")
            self.label.setToolTip(self._tooltip(current) if current else "")
            self.notice_shown.emit(current)
        wait = self.board.next_expiry()
        if wait is None:
            self._expiry.stop()
        else:
            self._expiry.start(int(wait * 1000) + 1)

    @staticmethod
    def _tooltip(notice: Notice) -> str:
        # Rich text, so that Qt wraps a long sentence instead of drawing it screen-wide.
        mark = SEVERITY_MARKS.get(notice.severity)
        body = html.escape(notice.whole).replace("\n", "<br>")
        return f"<p>{'<b>' + mark + ':</b> ' if mark else ''}{body}</p><p><i>Click to open it whole.</i></p>"

    def show_whole(self) -> QMessageBox | None:
        """The notice on the bar, whole, in a box whose text can be selected (returned for tests)."""
        current = self.board.current()
        if current is None:
            return None
        icon = {ERROR: QMessageBox.Critical, WARNING: QMessageBox.Warning}.get(current.severity,
                                                                               QMessageBox.Information)
        if self.box is not None:
            self.box.close()
        self.box = QMessageBox(icon, "Hearth", current.text, QMessageBox.Close, self.window())
        if current.detail and current.detail != current.text:
            self.box.setInformativeText(current.detail)
        self.box.setTextFormat(Qt.PlainText)
        self.box.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.box.open()
        return self.box
