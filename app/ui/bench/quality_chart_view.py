"""The Benchmark page's quality chart (#33): file size against mean KL divergence (log scale) of the model's quants,
from what `hearth bench quality` (or Measure… on the Models page) kept in data_dir()/bench/quality.json."""

from __future__ import annotations

import html
import math
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtWidgets import QWidget

from app.bench.quality_chart import MATRIX, PLAIN, entry_rows, log_range, series, size_range
from app.core.errors import HearthError
from app.ui.widgets import vbox, wrapped

COLORS = {PLAIN: "#1f77b4", MATRIX: "#ff7f0e"}
SYMBOLS = {PLAIN: "o", MATRIX: "s"}  # told apart without colour too
NOT_MEASURED = ("Quality not measured yet for {name}: on the Models page, Measure… under the quantize row scores its "
                "quants against the original on a text of yours (or run hearth bench quality --text FILE).")


class QualityChart(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.model_path: str | None = None
        self.points = series([])
        self.caption = wrapped(name="hint")
        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.setLogMode(x=False, y=True)
        self.plot.setLabel("bottom", "file size (MB)")
        self.plot.setLabel("left", "mean KL divergence")
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.addLegend(offset=(-10, 10))
        self.plot.setMinimumHeight(200)
        vbox(self.caption, (self.plot, 1), parent=self, margin=0)

    def show_for(self, model_path: str | None) -> None:
        """The kept figures of this model file (None: the bundled model, whose F16 copy is its base)."""
        from app.bench.quality_store import quality_for
        from app.core.library.bundled import bundled_model_path

        self.model_path = model_path
        self.plot.clear()
        legend = self.plot.plotItem.legend
        if legend is not None:
            legend.clear()
        self.points = series([])
        try:
            path = model_path or str(bundled_model_path())
        except HearthError as exc:  # no bundled model installed, and none loaded
            self.caption.setText(html.escape(str(exc)))
            return
        entry = quality_for(path)
        if entry:
            self.points = series(entry_rows(entry))
        drawn = [p for s in self.points["series"].values() for p in s]
        if not drawn:
            self.caption.setText(NOT_MEASURED.format(name=html.escape(Path(path).name)))
            return
        for name, pts in self.points["series"].items():
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            self.plot.plot(xs, ys, pen=pg.mkPen(COLORS[name], width=1.5), symbol=SYMBOLS[name], symbolSize=9,
                           symbolBrush=COLORS[name], symbolPen=None, name=name)
            for mb, kld, label in pts:
                text = pg.TextItem(f"{label} {kld:.3g}", color=COLORS[name], anchor=(0, 1 if name == PLAIN else 0))
                self.plot.addItem(text)
                text.setPos(mb, math.log10(kld))  # a log axis places items at the value's logarithm
        e0, e1 = log_range([p[1] for p in drawn])
        self.plot.setYRange(e0, e1, padding=0)
        self.plot.setXRange(*size_range([p[0] for p in drawn]), padding=0)
        zero = f" KLD 0 (the base itself): {', '.join(self.points['zero'])}." if self.points["zero"] else ""
        self.caption.setText(f"Quality of {html.escape(Path(path).name)}'s quants against "
                             f"{html.escape(Path(entry['base']).name)} on {html.escape(Path(entry['text']).name)} "
                             f"({entry['ctx']} tokens of context), measured {html.escape(entry.get('measured', '?'))}: "
                             f"lower is closer to the original.{zero}")

    def showEvent(self, event) -> None:
        # Measure… on the Models page may have added figures since: the file is small, read it again.
        self.show_for(self.model_path)
        super().showEvent(event)

    def apply_theme(self, dark: bool) -> None:
        theme_plot(self.plot, dark)


def theme_plot(plot: pg.PlotWidget, dark: bool) -> None:
    """The Benchmark page's charts on the window's light or dark background."""
    plot.setBackground("#0f1215" if dark else "w")
    fg = "#e5e7eb" if dark else "#111827"
    for axis in ("left", "bottom"):
        plot.getAxis(axis).setPen(fg)
        plot.getAxis(axis).setTextPen(fg)
