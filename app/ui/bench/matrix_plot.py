"""The bar chart of `hearth bench matrix --plot`, drawn with Qt (already a dependency), no display needed."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QPen

from app.bench.results import machine_label
from app.core.errors import HearthError
from app.ui.bench.canvas import white_canvas


def save_plot(result: dict, path: str | Path) -> None:
    """Bar chart: generation tok/s per row (min-max whiskers), one group per workload, and peak RSS per row."""
    width, height = 1100, 640
    image, painter, _app = white_canvas(width, height)
    colors = [QColor(c) for c in ("#7f7f7f", "#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd")]
    rows = result["rows"]
    names = list(result["workloads"])
    painter.setFont(QFont("Sans", 11))
    painter.drawText(QPointF(20, 24), f"hearth bench matrix: {result['model']}, median of {result['repeats']} runs")
    painter.setFont(QFont("Sans", 8))
    painter.drawText(QPointF(20, 42), f"{machine_label(result['machine'])}; {result['threads']} threads; "
                                      f"load average at start {result.get('load_average_start')}")

    def panel(box: QRectF, title: str, groups: list[str], value) -> None:
        values = [value(r, g) for g in groups for r in rows]
        top = max([v[2] for v in values if v] or [1.0]) * 1.15
        painter.setPen(QPen(QColor("black")))
        painter.drawRect(box)
        painter.drawText(QPointF(box.left(), box.top() - 6), title)
        painter.drawText(QPointF(box.left() - 48, box.top() + 10), f"{top:.0f}")
        painter.drawText(QPointF(box.left() - 20, box.bottom()), "0")
        group_w = box.width() / len(groups)
        bar_w = group_w * 0.8 / len(rows)
        for gi, g in enumerate(groups):
            x0 = box.left() + gi * group_w + group_w * 0.1
            painter.setPen(QPen(QColor("black")))
            painter.drawText(QRectF(box.left() + gi * group_w, box.bottom() + 4, group_w, 18),
                             Qt.AlignHCenter, result["workloads"][g]["label"] if g in result["workloads"] else "")
            for ri, r in enumerate(rows):
                x = x0 + ri * bar_w
                v = value(r, g)
                if v is None:
                    painter.setPen(QPen(QColor("#d62728")))
                    painter.drawText(QRectF(x, box.bottom() - 40, bar_w, 36), Qt.AlignCenter | Qt.TextWordWrap,
                                     "failed")
                    continue
                med, lo, hi = v
                h = box.height() * med / top
                painter.fillRect(QRectF(x + 2, box.bottom() - h, bar_w - 4, h), colors[ri % len(colors)])
                painter.setPen(QPen(QColor("black"), 1))
                cx = x + bar_w / 2
                if hi > lo:
                    painter.drawLine(QPointF(cx, box.bottom() - box.height() * lo / top),
                                     QPointF(cx, box.bottom() - box.height() * hi / top))
                painter.drawText(QRectF(x, box.bottom() - h - 16, bar_w, 14), Qt.AlignHCenter, f"{med:.0f}")

    def gen(r: dict, g: str):
        if r["status"] != "ok":
            return None
        s = r["workloads"][g]["gen_tok_s"]
        return s["median"], s["min"], s["max"]

    def rss(r: dict, _g: str):
        return None if r["status"] != "ok" else (r["peak_rss_mb"],) * 3

    panel(QRectF(70, 80, 640, 440), "generation tok/s (median, whisker: min-max)", names, gen)
    panel(QRectF(790, 80, 280, 440), "peak engine RSS (MB)", ["rss"], rss)
    # Legend
    for ri, r in enumerate(rows):
        x = 70 + (ri % 3) * 340
        y = 570 + (ri // 3) * 22
        painter.fillRect(QRectF(x, y - 11, 14, 14), colors[ri % len(colors)])
        painter.setPen(QPen(QColor("black")))
        label = r["label"] + ("" if r["status"] == "ok" else " (failed)")
        painter.drawText(QPointF(x + 20, y + 1), label)
    painter.end()
    if not image.save(str(path), "PNG"):
        raise HearthError(f"Could not write the plot to {path}.")

