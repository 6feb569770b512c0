"""Under the quantize row: each type's measured quality on the user's text (from `hearth bench quality`, kept in
data_dir()/bench/quality.json), "not measured yet" otherwise with Measure…, and the recommendation
(app/ui/models/quality_pick.py) with its threshold."""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDoubleSpinBox, QFileDialog, QLabel, QTableWidgetItem, QWidget

from app.ui.models.quality_pick import DEFAULT_THRESHOLD, recommend
from app.core.units import human_size
from app.ui.widgets import STRETCH, button, hbox, table, vbox, wrapped

SHOWN = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")  # bench quality's default types
COLUMNS = ["type", "file", "mean KLD", "same top", "+ matrix: mean KLD", "+ matrix: same top"]
NOT_MEASURED = "not measured yet"


class QualityPane(QWidget):
    measure_requested = Signal(str, str)  # model path, text file

    def __init__(self, parent=None):
        super().__init__(parent)
        self.path: str | None = None
        self.entry: dict | None = None
        self.room: tuple[float, float] | None = None  # (room MB, extra MB beside the file) from the fit estimate
        self.table = table(len(COLUMNS), "Quality of each quantization")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setMaximumHeight(170)
        self.threshold = QDoubleSpinBox()
        self.threshold.setAccessibleName("Recommendation threshold")
        self.threshold.setRange(0.0, 50.0)
        self.threshold.setSingleStep(0.5)
        self.threshold.setValue(DEFAULT_THRESHOLD)
        self.threshold.setSuffix(" points of Q8_0's same top")
        self.measure_button = button("Measure…", self._ask_text,
                                     "Score the quants against the original on a text of yours (hearth bench "
                                     "quality), in the background")
        self.about = wrapped(name="hint")
        self.advice = wrapped()
        # Measure… on a line of its own: beside the threshold it set the Library's minimum width, and with the
        # load settings beside it the page no longer fitted a 1024-pixel window.
        vbox(self.about, self.table, hbox(QLabel("Recommend within"), (self.threshold, 1)),
             hbox(STRETCH, self.measure_button), self.advice, parent=self, margin=0)
        self.threshold.valueChanged.connect(self._advise)

    def show_for(self, path: str | None) -> None:
        from app.bench.quality_store import quality_for

        self.path = path
        self.entry = quality_for(path) if path else None
        rows = (self.entry or {}).get("rows", {})
        types = list(SHOWN) + sorted({k.split("+")[0] for k in rows} - set(SHOWN))
        self.table.setRowCount(len(types))
        for r, qtype in enumerate(types):
            plain, matrix = rows.get(qtype), rows.get(qtype + "+imatrix")
            size = (plain or matrix or {}).get("size_bytes")
            cells = [qtype, human_size(size) if size else ""] + _figures(plain) + _figures(matrix, "-")
            if not plain and not matrix:
                cells[2] = NOT_MEASURED
            for c, value in enumerate(cells):
                self.table.setItem(r, c, QTableWidgetItem(value))
        self.table.resizeColumnsToContents()
        if self.entry:
            self.about.setText(f"Measured on {html.escape(self.entry['text'])} ({self.entry['ctx']} tokens of context) "
                               "against the original, on {}.".format(html.escape(self.entry.get("measured", "?"))))
        else:
            self.about.setText("Quality not measured yet for this model: Measure… scores its quants on a text of "
                               "yours.")
        self._advise()

    def set_fit(self, verdict: dict) -> None:
        """The fit estimate of the chosen model: its room in RAM and what it needs beside the weights."""
        from app.core.library.fit import RAM_RESERVE_MB

        try:
            self.room = (verdict["ram_available_mb"] - RAM_RESERVE_MB, verdict["total_mb"] - verdict["weights_mb"])
        except (KeyError, TypeError):
            self.room = None
        self._advise()

    def _advise(self, *_args) -> None:
        rows = (self.entry or {}).get("rows")
        if not rows:
            self.advice.setText("")
            return
        room, extra = self.room if self.room else (None, 0.0)
        self.advice.setText(html.escape(recommend(rows, room, extra, self.threshold.value())["sentence"], quote=False))

    def _ask_text(self) -> None:
        if not self.path:
            return
        text, _ = QFileDialog.getOpenFileName(self, "A text like yours, to score the quants on", "",
                                              "Text (*.txt *.md *.py *.json);;All files (*)")
        if text:
            self.measure_requested.emit(self.path, text)


def _figures(row: dict | None, missing: str = "") -> list[str]:
    if not row:
        return [missing, missing]
    return [f"{row['kld_mean']:.4f}", f"{100 * row['same_top']:.1f}%"]
