"""Run work once a window has painted for the first time: what a start can leave until the user sees Hearth."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication, QWidget


class _FirstPaintWatch(QObject):
    """Watches the whole application (a window's children paint too, not only the window) until one of
    window's widgets paints; then the callbacks run on the event loop's next turns, one per turn, so the
    input and the engine's news that arrive meanwhile are not held up by all of them at once."""

    def __init__(self, window: QWidget, callbacks: list[Callable[[], None]]):
        super().__init__(window)
        self.window = window
        self.callbacks = callbacks

    def eventFilter(self, obj, event):  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Paint and isinstance(obj, QWidget) and obj.window() is self.window:
            QApplication.instance().removeEventFilter(self)
            QTimer.singleShot(0, self, self._run_next)  # after this paint, not inside it
        return False

    def _run_next(self) -> None:
        if self.callbacks:
            self.callbacks.pop(0)()
            QTimer.singleShot(0, self, self._run_next)  # dropped if the window goes first


def after_first_paint(window: QWidget, callbacks: list[Callable[[], None]]) -> None:
    QApplication.instance().installEventFilter(_FirstPaintWatch(window, callbacks))
