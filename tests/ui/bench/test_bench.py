"""The Benchmark tab runs the real matrix (app.bench.matrix) in a worker: progress, cancel, table, chart, export."""

from __future__ import annotations

import csv
import json

import psutil
import pytest

pytest.importorskip("app.bench.matrix")

RUN_TIMEOUT_MS = 280_000


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.slow
@pytest.mark.heavy
def test_run_one_row_shows_table_and_chart_and_exports(qtbot, idle_window, tmp_path):
    w = idle_window
    bench = w.bench
    w.tabs.setCurrentWidget(bench)
    bench.rows = ["q8_0"]  # one row of the matrix keeps the test to a minute: the others run the same code
    bench.quick.setChecked(True)
    bench.repeats.setValue(1)
    formats: list[str] = []
    bench.jobs.bar.valueChanged.connect(lambda _v: formats.append(bench.jobs.bar.format()))
    with qtbot.waitSignal(bench.result_shown, timeout=RUN_TIMEOUT_MS) as shown:
        bench.run_button.click()
        assert not bench.run_button.isEnabled() and bench.jobs.cancel_button.isEnabled()
    result = shown.args[0]
    assert formats and any("Q8_0" in f for f in formats), formats
    assert bench.run_button.isEnabled() and not bench.jobs.isVisible()
    [row] = result["rows"]
    assert row["status"] == "ok", row.get("reason")
    # The table shows the workload's line as the CLI prints it; the chart's bars are its medians.
    assert bench.table.rowCount() == 1 and bench.table.item(0, 0).text() == "Q8_0 (INT8)"
    gen = row["workloads"][bench.workload.currentData()]["gen_tok_s"]["median"]
    assert bench.table.item(0, 2).text().startswith(f"{gen:.1f}")
    assert bench.chart_values()["chat"] == [pytest.approx(row["workloads"]["chat"]["gen_tok_s"]["median"])]
    assert "Machine:" in bench.caption.text()
    bench.workload.setCurrentIndex(bench.workload.findData("code"))
    assert bench.table.item(0, 2).text().startswith(f"{row['workloads']['code']['gen_tok_s']['median']:.1f}")
    # Export both ways, and open the JSON again.
    bench.export("json", str(tmp_path / "m.json"))
    bench.export("csv", str(tmp_path / "m.csv"))
    qtbot.waitUntil(lambda: (tmp_path / "m.json").exists() and (tmp_path / "m.csv").exists(), timeout=10_000)
    bench.tasks.join()
    assert json.loads((tmp_path / "m.json").read_text())["rows"][0]["id"] == "q8_0"
    lines = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert {r["workload"] for r in lines} == {"chat", "code"} and lines[0]["config"] == "Q8_0 (INT8)"
    bench.result = None
    with qtbot.waitSignal(bench.result_shown, timeout=10_000):
        bench.open_result(str(tmp_path / "m.json"))
    assert bench.table.rowCount() == 1


def test_cancel_stops_the_benchmark_and_its_child(qtbot, idle_window, tmp_path):
    w = idle_window
    bench = w.bench
    before = children()
    bench.rows = ["f16"]
    bench.quick.setChecked(True)
    bench.repeats.setValue(1)
    bench.run_button.click()
    qtbot.waitUntil(lambda: bench.jobs.bar.value() > 0, timeout=60_000)
    with qtbot.waitSignal(bench.jobs.job_cancelled, timeout=60_000):
        bench.jobs.cancel_button.click()
    # Said as news, not in red (#55 F: "Cancelled." showed as an error).
    assert "cancelled" in w.statusBar().currentMessage().lower() and w.notices.notice().severity == "info"
    assert "cancelled" in bench.caption.text().lower()
    assert bench.run_button.isEnabled() and not bench.jobs.isVisible()
    qtbot.waitUntil(lambda: not (children() - before - {w.bridge.pid}), timeout=10_000)
    # A file that is not a benchmark result: one sentence through the message bridge.
    (tmp_path / "x.json").write_text('{"kind": "something else"}')
    with qtbot.waitSignal(w.bench.noticed, timeout=10_000) as err:
        bench.open_result(str(tmp_path / "x.json"))
    assert "not a result of `hearth bench matrix`" in err.args[0].text
