"""The monitor's axes (#49.9): each quantity on an axis of its own unit. The KV cache's and the draft acceptance's
percent axes ran to 200%, and window shifts were a flat line on the percent axis, unreadable as a count."""

from __future__ import annotations

from app.ui.monitor.monitor_view import MonitorView


def test_each_quantity_has_an_axis_of_its_own_unit(qtbot):
    monitor = MonitorView()
    qtbot.addWidget(monitor)
    monitor.timer.stop()
    monitor.resize(300, 700)
    monitor.show()
    for i in range(20):  # a context filling to 98%, window shifts counting up, drafts accepted 97%
        monitor._on_stats({"gen_tok_s": 50.0, "n_ctx": 1000, "n_past": 600 + 20 * i,
                           "window": {"shifts": i // 4}, "spec": {"acceptance": 0.97, "drafted": 10 + i}})
        monitor.redraw()
    assert monitor.plots["kv"].viewRange()[1] == [0, 100.0]  # a share: never past 100%
    assert monitor.plots["draft"].viewRange()[1] == [0, 100.0]
    assert "shifts" not in monitor.members["kv"]  # a count is not drawn on the percent axis
    shifts = monitor.plots["shifts"]
    assert shifts.title.startswith("Window shifts (count)") and monitor.members["shifts"] == ["shifts"]
    top = shifts.viewRange()[1][1]
    assert top == int(top) and 4 <= top <= 10  # whole numbers, just above the 4 shifts so far
