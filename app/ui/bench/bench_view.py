"""The Benchmark tab: what quantization, speculation and the KV-cache settings buy on this machine.

It runs app.bench.matrix.run_matrix in a child process (app/bench/jobs.py; the matrix itself
measures in child processes of its own), with the Models page's JobBar for progress and
Cancel, then shows the matrix as a table per workload and a bar chart of
generation speed, and exports it as JSON or CSV. A saved result can be
opened again to compare.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFileDialog, QHeaderView, QLabel, QSplitter, QStackedWidget,
                               QTabWidget, QTableWidget, QTableWidgetItem, QWidget)

from app.ui.widgets.notices import ERROR, INFO, Notice, cleared
from app.bench.matrix_plan import WORKLOADS
from app.bench.matrix_report import table_rows, write_csv
from app.bench.results import load_result, write_json
from app.ui.widgets.clamped_spin import ClampingSpinBox
from app.ui.bench.quality_chart_view import QualityChart, theme_plot
from app.ui.bridge.worker import Tasks
from app.ui.widgets import JobBar, STRETCH, button, combo, hbox, table, vbox, wrapped

BAR_COLORS = ("#3b82f6", "#10b981", "#f59e0b", "#ef4444")
# Measured with the bundled 135M model on two idle cores (docs/benchmark_matrix.md): 1.6 minutes for three
# repeats, quantization included. Bigger models scale with their size; a busy CPU can take ten times as long.
FULL_RUN_MIN_PER_REPEAT = 0.55
QUICK_SHARE = 0.4  # quick answers are shorter; an estimate, not measured like the full run
EMPTY_STATE = ("No result yet.\n\nRun benchmark measures this machine with the loaded model: how fast it reads the "
               "prompt and writes the answer, and how much memory it takes, in F16, INT8, INT4, INT4 with "
               "speculative decoding and all combined, as the table in the README.\n\nOpen result… shows a run "
               "saved earlier (yours, or docs/benchmark_matrix.json from the project) to compare.")


def run_estimate(repeats: int, quick: bool, size_bytes: int | None = None) -> str:
    """How long a run takes, in words, for the caption."""
    minutes = FULL_RUN_MIN_PER_REPEAT * repeats * (QUICK_SHARE if quick else 1.0)
    if size_bytes:  # the bundled model is ~0.1 GB; speed falls about in proportion to size
        minutes *= max(1.0, size_bytes / 100e6)
    if minutes < 1:
        return "under a minute"
    if minutes < 90:
        return f"about {minutes:.0f} minute{'s' if round(minutes) != 1 else ''}"
    return f"about {minutes / 60:.0f} hours"


def matrix_available() -> bool:
    return importlib.util.find_spec("app.bench.matrix") is not None


class BenchView(QWidget):
    result_shown = Signal(object)  # the result dict
    noticed = Signal(object)  # a Notice (app.ui.widgets.notices) for the window's status bar

    def __init__(self, bridge=None, title=None, parent=None):
        """bridge: the window's EngineBridge, whose loaded local model the page benchmarks (followed by the page
        itself); title(info): the window's name of a model."""
        super().__init__(parent)
        self.bridge, self.title = bridge, title
        self.tasks = Tasks(self)
        self.result: dict | None = None
        self.model_path: str | None = None  # None: the bundled model
        self.rows: list[str] | None = None  # matrix row ids to run (tests run one); None: all

        self.model_label = QLabel()
        self.quick = QCheckBox("Quick (short answers, for a first look)")
        self.repeats = ClampingSpinBox("Repeats")
        self.repeats.setRange(1, 9)
        self.repeats.setValue(3)
        self.repeats.setPrefix("repeats ")
        self.run_button = button("Run benchmark", self.run)
        self.open_button = button("Open result…", self._on_open_clicked)
        self.json_button = button("Export JSON…", lambda: self._on_export_clicked("json"))
        self.csv_button = button("Export CSV…", lambda: self._on_export_clicked("csv"))
        self.jobs = JobBar(self.tasks)
        # Before the first run it lists what a run measures (it was empty, with no hint of its use, #49.21).
        self.workload = combo({name: workload["label"] for name, workload in WORKLOADS.items()})
        self.workload.setAccessibleName("Workload")
        self.workload.setSizeAdjustPolicy(QComboBox.AdjustToContents)
        self.workload.setToolTip("Each run answers every workload (" + ", ".join(w["label"] for w in WORKLOADS.values())
                                 + "); this chooses whose figures the table and the chart show")
        self.caption = wrapped(name="hint")
        self.caption.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.table = table(0, "Benchmark results")
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.setWordWrap(False)
        pg.setConfigOptions(antialias=False, foreground="#9ca3af")  # grey axes and text, legible on light and dark
        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.setLabel("left", "generation tok/s")
        self.plot.addLegend(offset=(-10, 10))
        self.plot.setMinimumHeight(200)
        self.plot.getAxis("bottom").setHeight(44)  # two-line row labels

        results = QSplitter(Qt.Vertical)
        results.addWidget(self.table)
        results.addWidget(self.plot)
        results.setSizes([200, 360])
        self.empty = wrapped(EMPTY_STATE, "hint")
        self.empty.setAlignment(Qt.AlignCenter)
        self.empty.setMargin(40)
        self.pages = QStackedWidget()  # the empty state until a result is shown
        self.pages.addWidget(self.empty)
        self.pages.addWidget(results)
        # Speed and memory (the matrix) beside quality (bench quality's kept figures): two questions, two tabs.
        self.quality = QualityChart()
        self.views = QTabWidget()
        self.views.setDocumentMode(True)
        self.views.addTab(self.pages, "Speed and memory")
        self.views.addTab(self.quality, "Quality: size vs KLD")
        top = hbox((self.model_label, 1), self.quick, self.repeats, self.run_button)
        files = hbox(QLabel("Workload"), self.workload, STRETCH, self.open_button, self.json_button, self.csv_button)
        vbox(top, self.jobs, self.caption, files, (self.views, 1), parent=self, margin=6)

        self.workload.currentIndexChanged.connect(self._show_table)
        self.jobs.job_finished.connect(lambda _kind, result: self.show_result(result))
        self.jobs.job_failed.connect(self._on_failed)
        self.jobs.job_cancelled.connect(self._on_cancelled)
        self.set_model(None)
        self._update_buttons()
        if not matrix_available():
            self.caption.setText("The benchmark module (app.bench.matrix) is not part of this build.")
            self.run_button.setEnabled(False)
        else:
            self.quick.toggled.connect(self._explain)
            self.repeats.valueChanged.connect(self._explain)
            self._explain()

        if bridge is not None:
            bridge.model_loaded.connect(self._on_model_loaded)
            if bridge.ready:
                self._on_model_loaded(bridge.info)

    def _explain(self, *_args) -> None:
        """What a run measures, how long it takes and what it leaves behind (while no result is shown)."""
        if self.result is not None or self.jobs.running:
            return
        size = None
        if self.model_path:
            try:
                size = Path(self.model_path).stat().st_size
            except OSError:
                pass
        self.caption.setText(
            "Measures F16, Q8_0 (INT8), Q4_K_M (INT4), INT4 with speculative decoding, and all combined, on this "
            f"machine: prompt and generation speed, time to first token, memory. A run takes "
            f"{run_estimate(self.repeats.value(), self.quick.isChecked(), size)} here on an idle CPU (longer while "
            "other programs are busy). It adds the F16, Q8_0 and Q4_K_M copies it makes to the library, where they "
            "stay for later runs and for chatting.")

    # --- running -----------------------------------------------------------------------
    def _on_model_loaded(self, info: dict) -> None:
        if not info.get("remote"):  # a remote model is its server's to benchmark
            self.set_model(info.get("path"), self.title(info) if self.title else None)

    def set_model(self, path: str | None, title: str | None = None) -> None:
        """The model to measure (the loaded one; None: the bundled model), named as the library names it."""
        self.model_path = path
        self.model_label.setText(f"Model: {title or (Path(path).name if path else 'the bundled model')}")
        self.model_label.setToolTip(path or "")
        self.quality.show_for(path)
        if hasattr(self, "pages") and matrix_available():
            self._explain()

    def run(self) -> bool:
        if not matrix_available():
            return False
        model, quick, repeats, rows = self.model_path, self.quick.isChecked(), self.repeats.value(), self.rows

        def work(report, cancel):
            from app.bench.jobs import run_job

            # In a child: the matrix's quality rows load models, and llama.cpp never runs in the window.
            return run_job("app.bench.matrix:run_matrix", {"model": model, "repeats": repeats, "quick": quick,
                                                           "rows": rows},
                           lambda f, message: report(f, 1.0, message), cancel)

        started = self.jobs.start("benchmark", "Benchmarking…", work)
        self._update_buttons()
        return started

    def _on_cancelled(self, _kind: str) -> None:
        self.caption.setText("Cancelled; nothing was measured.")
        self._update_buttons()
        self.noticed.emit(Notice("The benchmark was cancelled.", INFO, "bench"))

    def _on_failed(self, message: str) -> None:
        self.caption.setText(message)
        self._update_buttons()
        self.noticed.emit(Notice(message, ERROR, "bench"))

    def _update_buttons(self) -> None:
        self.run_button.setEnabled(matrix_available() and not self.jobs.running)
        has = self.result is not None
        self.json_button.setEnabled(has)
        self.csv_button.setEnabled(has and matrix_available())

    # --- showing -----------------------------------------------------------------------
    def show_result(self, result: dict) -> None:
        self.result = result
        self.pages.setCurrentIndex(1)
        self._update_buttons()
        names = list(result.get("workloads", {}))
        self.workload.blockSignals(True)
        self.workload.clear()
        for name in names:
            self.workload.addItem(result["workloads"][name].get("label", name), name)
        self.workload.blockSignals(False)
        self.caption.setText(self._caption(result))
        self.noticed.emit(cleared("bench"))  # an earlier failed run is answered
        self._show_table()
        self._show_chart()
        self.result_shown.emit(result)

    @staticmethod
    def _caption(result: dict) -> str:
        from app.bench.results import machine_label

        runs = f"median [min-max] of {result.get('repeats')} runs" + (" (quick)" if result.get("quick") else "")
        bw = (result.get("bandwidth") or {}).get("read_gb_s")
        text = f"{result.get('model')}, {result.get('threads')} threads, {runs}; % is the change against F16."
        if result.get("machine"):
            text += f" Machine: {machine_label(result['machine'])}"
        if bw:
            text += f"; read bandwidth {bw:.1f} GB/s"
        if result.get("load_average_start") is not None:
            text += f"; load average {result['load_average_start']} at the start"
        return text + "."

    def _show_table(self, *_args) -> None:
        name = self.workload.currentData()
        if self.result is None or name is None:
            return
        rows = table_rows(self.result, name)
        self.table.clear()
        self.table.setColumnCount(len(rows[0]))
        self.table.setRowCount(len(rows) - 1)
        self.table.setHorizontalHeaderLabels(rows[0])
        for r, line in enumerate(rows[1:]):
            failed = len(line) > 1 and line[1].startswith("FAILED")
            for c, value in enumerate(line):
                item = QTableWidgetItem(value)
                if failed:
                    item.setForeground(Qt.red)
                item.setToolTip(value)
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)

    def chart_values(self) -> dict[str, list[float]]:
        """Generation tok/s (median) per workload, one value per row; 0 for a failed row."""
        def median(row: dict, name: str) -> float:
            gen = ((row.get("workloads") or {}).get(name) or {}).get("gen_tok_s") if row["status"] == "ok" else None
            return float(gen["median"]) if gen else 0.0

        return {name: [median(row, name) for row in self.result["rows"]]
                for name in (self.result or {}).get("workloads", {})}

    def _show_chart(self) -> None:
        self.plot.clear()
        legend = self.plot.plotItem.legend
        if legend is not None:
            legend.clear()
        values = self.chart_values()
        rows = self.result["rows"]
        width = 0.8 / max(1, len(values))
        for k, (name, heights) in enumerate(values.items()):
            x = np.arange(len(rows)) - 0.4 + width * (k + 0.5)
            bars = pg.BarGraphItem(x=x, height=heights, width=width * 0.9, brush=BAR_COLORS[k % len(BAR_COLORS)],
                                   pen=None, name=self.result["workloads"][name].get("label", name))
            self.plot.addItem(bars)
        labels = [(i, row["label"].replace(" + ", "\n+ ")) for i, row in enumerate(rows)]
        self.plot.getAxis("bottom").setTicks([labels])
        self.plot.setXRange(-0.6, len(rows) - 0.4, padding=0)
        top = max([v for h in values.values() for v in h] + [1.0])
        self.plot.setYRange(0, top * 1.15, padding=0)

    def apply_theme(self, dark: bool) -> None:
        theme_plot(self.plot, dark)
        self.quality.apply_theme(dark)

    # --- files -------------------------------------------------------------------------
    def _on_open_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a benchmark result", "", "Benchmark results (*.json)")
        if path:
            self.open_result(path)

    def open_result(self, path: str) -> None:
        self.tasks.run(lambda: load_result(path), self.show_result, self._on_failed, "open-result")

    def _on_export_clicked(self, kind: str) -> None:
        if self.result is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, f"Export the benchmark as {kind.upper()}",
                                              f"hearth-bench.{kind}", f"{kind.upper()} files (*.{kind})")
        if path:
            self.export(kind, path)

    def export(self, kind: str, path: str) -> None:
        result = self.result
        write = write_json if kind == "json" else write_csv
        self.tasks.run(lambda: write(result, path), lambda _r: self.caption.setText(f"Saved {path}."),
                       self._on_failed, "export")

    def close_tasks(self) -> None:
        self.jobs.cancel()
        self.tasks.join()
