"""One graph of the live monitor, painted with QPainter: lines and dots over "seconds ago".

The monitor redraws four times a second while an answer streams, on the CPU the engine's threads need, so a
redraw must cost next to nothing. pyqtgraph's scene did it in about 6 ms (3 ms of Python bookkeeping per
redraw for items that move, 2-3 ms of painting a graphics scene); here a redraw is one copy of a cached frame
and a polyline per series.

- The frame (background, title with its legend and note, axes, ticks, grid) is painted once into a pixmap and
  again only when something it shows changes: the size, the title, the x span, the y range or the colours.
  The x axis counts seconds back from now, so time passing never changes it.
- The series keep absolute times; a paint maps the points still in view to pixels with numpy and draws each
  unbroken run (a NaN ends a run: no line across the gap between answers) as one polyline, or a dot per
  point for the series with one point per answer.
"""

from __future__ import annotations

import math

import numpy as np
import shiboken6
from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPen, QPixmap, QPolygonF, QTextDocument
from PySide6.QtWidgets import QSizePolicy, QWidget

TITLE_PT = 9  # at the dock's narrowest a larger title ran past the plot's edges
TICK_PT = 8
DOT_RADIUS = 3.5
DOT_RADIUS_PX = math.ceil(DOT_RADIUS)  # the room a dot takes past the data area, in whole pixels
RIGHT_MARGIN = 0.04  # room right of "now", so the newest dot is not cut in half
MIN_PLOT_HEIGHT = 36  # pixels of plot area below a title, at the least


def nice_step(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^n at or above value (any positive value)."""
    if value <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * scale >= value * (1 - 1e-9):
            return step * scale
    return 10 * scale


def tick_text(value: float) -> str:
    return f"{value:g}"


def ago_text(value: float) -> str:
    return "now" if abs(value) < 1e-9 else f"{-value:g} s ago"


class Curve:
    """A series as the plot draws it: absolute times and values, a colour, a line or dots."""

    def __init__(self, color: str, dots: bool, right: bool = False):
        self.color = QColor(color)
        self.dots = dots
        self.right = right  # on the plot's right-hand axis, a quantity of another unit (a count beside a share)
        self.x = np.empty(0)
        self.y = np.empty(0)

    def setData(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self.x, self.y


class LivePlot(QWidget):
    def __init__(self, title: str, x_span: float, parent=None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Expanding)
        # Every pixel is painted (the frame is opaque): Qt need not paint the dock beneath first.
        self.setAttribute(Qt.WA_OpaquePaintEvent)
        self.title = title  # rich text: the name, a legend line, a note
        self.curves: dict[str, Curve] = {}
        self.now = 0.0  # the time drawn at x = 0
        self.x_span = x_span
        self.y_top = 1.0
        self.y2_top = 1.0  # the right-hand axis's top, for curves of another unit; whole numbers (a count)
        self.background = QColor("#ffffff")
        self.foreground = QColor("#9ca3af")
        self._frame: QPixmap | None = None
        self._shown = False  # whether the last paint drew any point
        self.frames = 0  # frames painted, counted for tests: time passing alone must not paint one
        self._area = QRectF()  # where the data goes, in this widget's pixels
        self._title_doc = QTextDocument()
        self._title_font = QFont(self.font())
        self._title_font.setPointSize(TITLE_PT)
        self._title_doc.setDefaultFont(self._title_font)
        self._set_title_html()
        self._tick_font = QFont(self.font())
        self._tick_font.setPointSize(TICK_PT)

    # --- what it shows ----------------------------------------------------
    def add_curve(self, name: str, color: str, dots: bool = False, right: bool = False) -> Curve:
        curve = self.curves[name] = Curve(color, dots, right)
        self._invalidate()  # a right-hand curve brings its axis
        return curve

    def set_title(self, title: str) -> None:
        if title != self.title:
            self.title = title
            self._set_title_html()
            self._invalidate()
            self.updateGeometry()  # a title of another number of lines needs another height

    def set_x_span(self, span: float) -> None:
        if span != self.x_span:
            self.x_span = span
            self._invalidate()

    def set_y_top(self, top: float) -> None:
        if top != self.y_top:
            self.y_top = top
            self._invalidate()

    def set_y2_top(self, top: float) -> None:
        if top != self.y2_top:
            self.y2_top = top
            self._invalidate()

    def right_range(self) -> list[float]:
        """[y0, y1] of the right-hand axis."""
        return [0.0, self.y2_top]

    def set_colors(self, background: str, foreground: str) -> None:
        self.background, self.foreground = QColor(background), QColor(foreground)
        self._set_title_html()
        self._invalidate()

    def viewRange(self) -> list[list[float]]:
        """[[x0, x1], [y0, y1]]: seconds ago (negative) to just past now, and the values shown."""
        return [[-self.x_span, self.x_span * RIGHT_MARGIN], [0.0, self.y_top]]

    def advance(self, now: float) -> None:
        """Time passed: the lines move left. Only the data area is painted again (the frame has not changed),
        and a plot that shows nothing, now or before (the draft graph with speculation off), not at all."""
        x0 = now + self.viewRange()[0][0]
        shown = any(len(curve.x) and curve.x[-1] >= x0 for curve in self.curves.values())
        if shown or self._shown:
            self.update(self._area.toAlignedRect().adjusted(-DOT_RADIUS_PX, -DOT_RADIUS_PX, DOT_RADIUS_PX + 1,
                                                            DOT_RADIUS_PX + 1))
        self._shown = shown
        self.now = now

    def _invalidate(self) -> None:
        self._frame = None
        self.update()

    # --- size ---------------------------------------------------------------
    def _set_title_html(self) -> None:
        """Parsed once per title or colour: the layout asks for the title's height far more often."""
        # The title's own colour; the legend's entries keep theirs.
        self._title_doc.setHtml(f"<div align='center' style='color:{self.foreground.name()}'>{self.title}</div>")

    def _title_height(self, width: int) -> float:
        self._title_doc.setTextWidth(max(1, width))
        return self._title_doc.size().height()

    def title_width(self) -> float:
        """The width the title takes, its lines wrapped at this plot's width."""
        self._title_height(self.width() - 4)
        return self._title_doc.idealWidth()

    def minimumSizeHint(self) -> QSize:
        return QSize(120, int(self._title_height(max(self.width(), 200))) + MIN_PLOT_HEIGHT + 16)

    def sizeHint(self) -> QSize:
        return QSize(240, self.minimumSizeHint().height() + 60)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._frame = None

    # --- painting -----------------------------------------------------------
    @staticmethod
    def _ticks(span: float, most: int) -> list[float]:
        """0 and nice steps up to span: at most four steps, fewer when `most` labels are all the room holds."""
        step = nice_step(span / max(1, min(4, most - 1)))
        return [i * step for i in range(int(span / step + 1e-9) + 1)]

    def data_area(self) -> QRectF:
        """Where the data is drawn, in this plot's pixels (known once it has painted)."""
        return QRectF(self._area)

    def _paint_frame(self) -> QPixmap:
        self.frames += 1
        ratio = self.devicePixelRatioF()
        pixmap = QPixmap(self.size() * ratio)
        pixmap.setDevicePixelRatio(ratio)
        pixmap.fill(self.background)
        p = QPainter(pixmap)
        w, h = self.width(), self.height()
        title_h = self._title_height(w - 4)
        p.save()
        p.translate(2, 0)
        self._title_doc.drawContents(p)
        p.restore()

        p.setFont(self._tick_font)
        metrics = p.fontMetrics()
        bottom = metrics.height() + 6
        area_h = max(1.0, h - title_h - 4 - bottom)
        ys = self._ticks(self.y_top, int(area_h / (1.5 * metrics.height())))  # a line and a half apart
        left = max(metrics.horizontalAdvance(tick_text(y)) for y in ys) + 8
        right_curves = [c for c in self.curves.values() if c.right]
        y2s = [y for y in self._ticks(self.y2_top, int(area_h / (1.5 * metrics.height()))) if y == int(y)]
        right = max(metrics.horizontalAdvance(tick_text(y)) for y in y2s) + 8 if right_curves else 8
        area = QRectF(left, title_h + 4, max(1.0, w - left - right), area_h)
        widest = metrics.horizontalAdvance(ago_text(-self.x_span)) + 12  # labels apart by a space at least
        xs = [-x for x in self._ticks(self.x_span, int(area.width() / widest))]
        self._area = area
        grid = QColor(self.foreground)
        grid.setAlphaF(0.2)
        (x0, x1), (y0, y1) = self.viewRange()
        for y in ys:
            py = area.bottom() - (y - y0) / (y1 - y0) * area.height()
            p.setPen(QPen(grid, 1))
            p.drawLine(QPointF(area.left(), py), QPointF(area.right(), py))
            p.setPen(self.foreground)
            p.drawText(QRectF(0, py - metrics.height() / 2, left - 4, metrics.height()),
                       Qt.AlignRight | Qt.AlignVCenter, tick_text(y))
        for x in xs:
            px = area.left() + (x - x0) / (x1 - x0) * area.width()
            p.setPen(QPen(grid, 1))
            p.drawLine(QPointF(px, area.top()), QPointF(px, area.bottom()))
            p.setPen(self.foreground)
            label = ago_text(x)
            half = metrics.horizontalAdvance(label) / 2
            cx = min(max(px, area.left() + half), w - half - 1)  # the end labels stay inside the widget
            p.drawText(QRectF(cx - half - 1, area.bottom() + 3, 2 * half + 2, metrics.height()),
                       Qt.AlignCenter, label)
        if right_curves:  # the right-hand axis, its labels in its curve's colour
            p.setPen(right_curves[0].color)
            for y in y2s:
                py = area.bottom() - y / self.y2_top * area.height()
                p.drawText(QRectF(area.right() + 4, py - metrics.height() / 2, right - 4, metrics.height()),
                           Qt.AlignLeft | Qt.AlignVCenter, tick_text(y))
        p.setPen(QPen(self.foreground, 1))
        p.drawLine(area.bottomLeft(), area.bottomRight())
        p.drawLine(area.bottomLeft(), area.topLeft())
        if right_curves:
            p.drawLine(area.bottomRight(), area.topRight())
        p.end()
        return pixmap

    def paintEvent(self, event) -> None:
        if self._frame is None or self._frame.size() != self.size() * self.devicePixelRatioF():
            self._frame = self._paint_frame()
        p = QPainter(self)
        p.drawPixmap(0, 0, self._frame)
        area = self._area
        p.setClipRect(area.adjusted(0, -DOT_RADIUS, DOT_RADIUS, 1))  # a line at 0 shows on the axis
        (x0, x1), (y0, y1) = self.viewRange()
        sx = area.width() / (x1 - x0)
        for curve in self.curves.values():
            sy = area.height() / (self.y2_top if curve.right else y1 - y0)
            x, y = curve.x, curve.y
            if not len(x):
                continue
            # Only the points in view, and the one before them (a line enters from the left edge).
            start = max(0, int(np.searchsorted(x, self.now + x0)) - 1)
            px = area.left() + (x[start:] - self.now - x0) * sx
            py = area.bottom() - (y[start:] - y0) * sy
            if curve.dots:
                p.setPen(Qt.NoPen)
                p.setBrush(curve.color)
                for cx, cy in zip(px.tolist(), py.tolist()):
                    if math.isfinite(cy):
                        p.drawEllipse(QPointF(cx, cy), DOT_RADIUS, DOT_RADIUS)
                continue
            p.setPen(QPen(curve.color, 1))
            p.setBrush(Qt.NoBrush)
            for a, b in finite_runs(py):
                if b - a == 1:
                    p.drawPoint(QPointF(px[a], py[a]))
                else:
                    p.drawPolyline(polygon(px[a:b], py[a:b]))
        p.end()


def finite_runs(values: np.ndarray) -> list[tuple[int, int]]:
    """[(start, end)] of the runs of finite values, end exclusive."""
    finite = np.isfinite(values)
    if finite.all():
        return [(0, len(values))]
    edges = np.flatnonzero(np.diff(np.concatenate(([False], finite, [False])).astype(np.int8)))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def polygon(x: np.ndarray, y: np.ndarray) -> QPolygonF:
    """A QPolygonF of the points, written through a numpy view of its memory (as pyqtgraph does): making a
    QPointF per point costs about a microsecond each."""
    poly = QPolygonF()
    poly.resize(len(x))
    view = np.frombuffer(shiboken6.VoidPtr(poly.data(), 16 * len(x), True), np.double).reshape(-1, 2)
    view[:, 0] = x
    view[:, 1] = y
    return poly
