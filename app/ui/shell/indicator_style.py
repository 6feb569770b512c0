"""Check boxes that can be seen on the dark theme.

Fusion outlines a check box's square with the window colour made darker: on the dark palette that is near black
on a near-black base, so the chat's Documents box showed its unticked collections with no box at all (#49.18).
This style draws Fusion's indicator, then, on a dark palette, an outline in the text colour, softened.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import QProxyStyle, QStyle

OUTLINED = (QStyle.PE_IndicatorCheckBox, QStyle.PE_IndicatorItemViewItemCheck)
OUTLINE_ALPHA = 150  # of 255: plainly a box, quieter than the text beside it


class VisibleIndicatorStyle(QProxyStyle):
    def drawPrimitive(self, element, option, painter, widget=None):  # noqa: N802 (Qt's name)
        super().drawPrimitive(element, option, painter, widget)
        if element not in OUTLINED or option.palette.base().color().lightness() >= 128:
            return
        colour = QColor(option.palette.text().color())
        colour.setAlpha(OUTLINE_ALPHA)
        painter.save()
        painter.setRenderHint(painter.RenderHint.Antialiasing, True)
        painter.setPen(QPen(colour, 1))
        painter.setBrush(Qt.NoBrush)
        side = min(option.rect.width(), option.rect.height()) - 1
        square = option.rect.adjusted(0, 0, -(option.rect.width() - 1 - side), -(option.rect.height() - 1 - side))
        painter.drawRoundedRect(square, 2, 2)
        painter.restore()
