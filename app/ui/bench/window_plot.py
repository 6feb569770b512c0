"""The chart of `hearth bench window --plot`: tok/s and RSS over a long generation, drawn with Qt."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor, QPen

from app.core.errors import HearthError
from app.ui.bench.canvas import white_canvas


def save_plot(path: str, result: dict) -> None:
    """Two panels, tok/s and RSS over tokens generated, drawn with Qt (already a dependency)."""
    width, height = 900, 560
    image, painter, _app = white_canvas(width, height)
    runs = [("window", result["series"], QColor("#1f77b4"))]
    if result.get("truncate_middle"):
        runs.append(("truncate-middle", result["truncate_middle"]["series"], QColor("#d62728")))
    panels = [("tok/s per 1000 tokens", "tok_s"), ("RSS (MB)", "rss_mb")]
    for index, (title, key) in enumerate(panels):
        box = QRectF(70, 40 + index * 260, width - 100, 200)
        values = [row[key] for _, rows, _ in runs for row in rows] or [0.0]
        top = max(values) * (1.1 if key == "tok_s" else 1.02) or 1.0
        bottom = 0.0 if key == "tok_s" else min(values) * 0.98
        n_max = max((rows[-1]["tokens"] for _, rows, _ in runs if rows), default=1)
        painter.setPen(QPen(QColor("black")))
        painter.drawRect(box)
        painter.drawText(QPointF(box.left(), box.top() - 8), f"{title}, ctx {result['ctx']}")
        painter.drawText(QPointF(box.left() - 60, box.top() + 12), f"{top:.0f}")
        painter.drawText(QPointF(box.left() - 60, box.bottom()), f"{bottom:.0f}")
        painter.drawText(QPointF(box.right() - 60, box.bottom() + 16), f"{n_max} tokens")
        for slot, (name, rows, color) in enumerate(runs):
            painter.setPen(QPen(color, 2))
            points = [QPointF(box.left() + box.width() * row["tokens"] / n_max,
                              box.bottom() - box.height() * (row[key] - bottom) / ((top - bottom) or 1.0))
                      for row in rows]
            for a, b in zip(points, points[1:]):
                painter.drawLine(a, b)
            painter.drawText(QPointF(box.left() + 10 + 160 * slot, box.top() + 16), name)
    painter.end()
    if not image.save(path, "PNG"):
        raise HearthError(f"Could not write the plot to {path}.")
