"""Number boxes that clamp a typed value visibly, with a sentence (#49.15).

Qt's spin boxes refuse a keystroke that cannot lead to a value in range: "-5" attention sinks became 5 (the minus
was dropped), and 999 CPU threads left the box at "Auto" (every 9 was dropped), without a word. These boxes let
any number be typed, and when the typing ends, a value out of range becomes the nearest allowed one and the box
says so: a balloon at the box, and `clamped` with the sentence for the page's status line.
"""

from __future__ import annotations

import re

from PySide6.QtCore import QPoint, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox, QToolTip

NUMBER = re.compile(r"^[+-]?(\d+([.,]\d*)?|[.,]\d+)?$")


class _Clamping:
    """The typing and fixing of both boxes; `what` names the setting in the sentence ("Attention sinks")."""

    clamped: Signal
    last_sentence = ""

    def __init__(self, what: str, parent=None):
        super().__init__(parent)
        self.what = what
        self.setAccessibleName(what)  # what a screen reader says, wherever the box sits (a form, a row)

    def _bare(self, text: str) -> str:
        return text.removeprefix(self.prefix()).removesuffix(self.suffix()).strip()

    def validate(self, text: str, pos: int):  # noqa: D401 (Qt's name)
        bare = self._bare(text)
        if self.specialValueText() and text == self.specialValueText():
            return QValidator.Acceptable, text, pos
        if not NUMBER.match(bare):
            return QValidator.Invalid, text, pos
        try:
            number = float(bare.replace(",", "."))
        except ValueError:  # "", "-", "+": on the way to a number
            return QValidator.Intermediate, text, pos
        if self.minimum() <= number <= self.maximum():
            return super().validate(text, pos)
        return QValidator.Intermediate, text, pos  # typed on; clamped, and said, when the typing ends

    def fixup(self, text: str) -> str:
        bare = self._bare(text)
        try:
            number = float(bare.replace(",", "."))
        except ValueError:
            return super().fixup(text)
        value = min(max(number, self.minimum()), self.maximum())
        if value != number:
            shown = self.textFromValue(value)
            if value == self.minimum() and self.specialValueText():
                shown = self.specialValueText()
            side = "below" if value == self.minimum() else "above"
            self.last_sentence = (f"{self.what} cannot be {side} {self.textFromValue(value)}; {bare} was set to "
                                  f"{shown}.")
            QToolTip.showText(self.mapToGlobal(QPoint(0, self.height())), self.last_sentence, self)
            self.clamped.emit(self.last_sentence)
        return self.prefix() + self.textFromValue(value) + self.suffix()


class ClampingSpinBox(_Clamping, QSpinBox):
    clamped = Signal(str)


class ClampingDoubleSpinBox(_Clamping, QDoubleSpinBox):
    clamped = Signal(str)


def say_clamps(page, noticed) -> None:
    """Every clamping box of page says its sentence on the status bar too (noticed: the page's Notice signal)."""
    from app.ui.widgets.notices import WARNING, Notice

    for kind in (ClampingSpinBox, ClampingDoubleSpinBox):
        for box in page.findChildren(kind):
            box.clamped.connect(lambda sentence: noticed.emit(Notice(sentence, WARNING, "settings.clamped")))
