"""The mouse wheel scrolls the page; it changes a setting only in the control the user is working in.

Qt lets a wheel over any combo box, spin box or slider change its value, and gives it the focus on the way: a
user scrolling the Models page with the pointer passing over Flash attention turned it from auto to off, and
the next load used that. Every such control in the app is fitted once, when the style polishes it (so the
pages built later and the dialogs are too): it takes the focus by click or Tab only (Qt.StrongFocus), and a
wheel over it while it does not have the focus goes to the scrolling pane around it instead (or nowhere, when
there is none). The style is the one place that sees every widget once; an event filter on the whole
application would run Python for every event the window handles, tokens included.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (QAbstractScrollArea, QAbstractSlider, QAbstractSpinBox, QComboBox, QProxyStyle,
                               QScrollBar, QWidget)


def guarded(widget: QWidget) -> bool:
    """A control whose value a wheel would change (a scroll bar's value is what a wheel is for)."""
    return isinstance(widget, (QComboBox, QAbstractSpinBox)) or (
        isinstance(widget, QAbstractSlider) and not isinstance(widget, QScrollBar))


class WheelToPane(QObject):
    """The event filter on each guarded control: an unfocused control's wheel scrolls the pane around it."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Wheel or not isinstance(watched, QWidget) or watched.hasFocus():
            return False
        pane = scroll_area_around(watched)
        if pane is not None:
            viewport = pane.viewport()
            position = QPointF(viewport.mapFromGlobal(event.globalPosition().toPoint()))
            forwarded = QWheelEvent(position, event.globalPosition(), event.pixelDelta(), event.angleDelta(),
                                    event.buttons(), event.modifiers(), event.phase(), event.inverted(),
                                    event.source())
            QCoreApplication.sendEvent(viewport, forwarded)
        event.accept()
        return True  # the control never sees it


def scroll_area_around(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            return parent
        parent = parent.parentWidget()
    return None


class WheelSafeStyle(QProxyStyle):
    """The app's style (Fusion) that fits every guarded control as it is polished."""

    def __init__(self, base="Fusion"):
        """base: a style's name, or a style (a proxy of its own: the check boxes' outline)."""
        super().__init__(base)
        self.guard = WheelToPane(self)

    def polish(self, target):
        if isinstance(target, QWidget) and guarded(target):
            target.setFocusPolicy(Qt.StrongFocus)  # the default WheelFocus would focus it on the first wheel
            target.removeEventFilter(self.guard)  # polished again on a style change: one filter, not two
            target.installEventFilter(self.guard)
        return super().polish(target)
