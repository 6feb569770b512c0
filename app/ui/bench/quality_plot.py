"""The chart of `hearth bench quality --plot`: file size against mean KL divergence (log scale), one point per
quant, without and with a matrix as two series, drawn with Qt (already a dependency), no display needed."""

from __future__ import annotations

import math
from pathlib import Path

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QPen

from app.bench.quality_chart import MATRIX, PLAIN, log_range, series, size_range
from app.core.errors import HearthError
from app.ui.bench.canvas import white_canvas

COLORS = {PLAIN: QColor("#1f77b4"), MATRIX: QColor("#ff7f0e")}


def save_plot(result: dict, path: str | Path) -> None:
    """Size (MB) on x, mean KLD on y (log), each point labelled with its type; the base's size as a dashed line."""
    points = series(result["rows"])
    drawn = [p for s in points["series"].values() for p in s]
    if not drawn:
        raise HearthError("No quant was measured, so there is nothing to plot.")
    width, height = 900, 600
    image, painter, _app = white_canvas(width, height)
    box = QRectF(90, 70, width - 130, height - 140)
    base = result["base"]
    base_mb = base["size_bytes"] / 1e6
    x0, x1 = size_range([p[0] for p in drawn], base_mb)
    e0, e1 = log_range([p[1] for p in drawn])

    def at(mb: float, kld: float) -> QPointF:
        return QPointF(box.left() + box.width() * (mb - x0) / (x1 - x0),
                       box.bottom() - box.height() * (math.log10(kld) - e0) / (e1 - e0))

    black, grey = QPen(QColor("black")), QPen(QColor("#d0d0d0"))
    painter.setFont(QFont("Sans", 11))
    painter.drawText(QPointF(20, 24), f"hearth bench quality: {Path(base['path']).name} on "
                                      f"{Path(result['text']).name}, context {result['ctx']}")
    painter.setFont(QFont("Sans", 8))
    painter.drawText(QPointF(20, 42), f"{base['positions']:,} positions scored (llama-perplexity's definitions); "
                                      f"load average {result.get('load_average')}")
    # Decades and their halves: the grid a reader needs to read a KLD off a log axis.
    for e in range(e0, e1 + 1):
        y = at(x0, 10.0 ** e).y()
        painter.setPen(grey)
        painter.drawLine(QPointF(box.left(), y), QPointF(box.right(), y))
        painter.setPen(black)
        painter.drawText(QRectF(box.left() - 80, y - 8, 74, 16), Qt.AlignRight | Qt.AlignVCenter, f"{10.0 ** e:g}")
    for mb in _size_ticks(x0, x1):
        x = at(mb, 10.0 ** e0).x()
        painter.setPen(grey)
        painter.drawLine(QPointF(x, box.top()), QPointF(x, box.bottom()))
        painter.setPen(black)
        painter.drawText(QRectF(x - 40, box.bottom() + 4, 80, 16), Qt.AlignHCenter, f"{mb:g}")
    painter.setPen(black)
    painter.drawRect(box)
    painter.drawText(QRectF(box.left(), box.bottom() + 24, box.width(), 18), Qt.AlignHCenter, "file size (MB)")
    painter.save()
    painter.translate(24, box.center().y())
    painter.rotate(-90)
    painter.drawText(QRectF(-120, -10, 240, 20), Qt.AlignCenter, "mean KL divergence (log)")
    painter.restore()
    dashed = QPen(QColor("#7f7f7f"), 1, Qt.DashLine)
    painter.setPen(dashed)
    bx = at(base_mb, 10.0 ** e0).x()
    painter.drawLine(QPointF(bx, box.top()), QPointF(bx, box.bottom()))
    painter.drawText(QPointF(bx - 4, box.top() - 6), f"base {base_mb:.0f} MB")
    painter.setFont(QFont("Sans", 9))
    for name, pts in points["series"].items():
        color = COLORS[name]
        painter.setPen(QPen(color, 1.5))
        for a, b in zip(pts, pts[1:]):
            painter.drawLine(at(a[0], a[1]), at(b[0], b[1]))
        for mb, kld, label in pts:
            p = at(mb, kld)
            _marker(painter, name, p)
            painter.setPen(QPen(color.darker(140)))
            painter.drawText(QPointF(p.x() + 8, p.y() + (-6 if name == PLAIN else 14)), f"{label} {kld:.3g}")
            painter.setPen(QPen(color, 1.5))
    painter.setBrush(Qt.NoBrush)
    # The legend in the top right corner: large files sit low (little divergence), so that corner stays free.
    legend = [n for n, pts in points["series"].items() if pts]
    frame = QRectF(box.right() - 170, box.top() + 8, 162, 10 + 18 * len(legend))
    painter.fillRect(frame, QColor("white"))
    painter.setPen(grey)
    painter.drawRect(frame)
    for i, name in enumerate(legend):
        y = frame.top() + 14 + 18 * i
        painter.setPen(QPen(COLORS[name], 1.5))
        _marker(painter, name, QPointF(frame.left() + 12, y))
        painter.setPen(black)
        painter.drawText(QPointF(frame.left() + 26, y + 4), name)
    if points["zero"]:
        painter.drawText(QPointF(box.left(), height - 16), f"KLD 0 (the base itself, not on a log axis): "
                                                          f"{', '.join(points['zero'])}")
    painter.end()
    if not image.save(str(path), "PNG"):
        raise HearthError(f"Could not write the plot to {path}.")


def _marker(painter, name: str, p: QPointF) -> None:
    """A dot for a type made without a matrix, a square for one made with it: told apart without colour too."""
    painter.setBrush(COLORS[name])
    if name == PLAIN:
        painter.drawEllipse(p, 5, 5)
    else:
        painter.drawRect(QRectF(p.x() - 5, p.y() - 5, 10, 10))
    painter.setBrush(Qt.NoBrush)


def _size_ticks(low: float, high: float) -> list[float]:
    """Round sizes across the axis, four to eight of them."""
    span = high - low
    step = 10 ** math.floor(math.log10(span / 4))
    for factor in (1, 2, 5, 10):
        if span / (step * factor) <= 8:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]
