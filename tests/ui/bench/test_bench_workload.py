"""The Benchmark page's Workload box before the first run (#49.21): it was empty, with no hint of what it is for."""

from __future__ import annotations

from app.bench.matrix_plan import WORKLOADS


def test_the_workload_box_lists_what_a_run_measures_before_any_run(qtbot, idle_window):
    bench = idle_window.bench
    assert bench.result is None and bench.pages.currentWidget() is bench.empty
    shown = [bench.workload.itemText(i) for i in range(bench.workload.count())]
    assert shown == [w["label"] for w in WORKLOADS.values()] and bench.workload.currentText() == "free-form chat"
    assert "chooses whose figures the table and the chart show" in bench.workload.toolTip()
