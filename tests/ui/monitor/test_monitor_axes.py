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
    kv = monitor.plots["kv"]
    assert kv.viewRange()[1] == [0, 100.0]  # a share: never past 100%
    assert monitor.plots["draft"].viewRange()[1] == [0, 100.0]
    # The shifts are a count on the KV graph's right-hand axis: whole numbers, just above the 4 so far.
    assert kv.curves["shifts"].right and not kv.curves["kv_fill"].right
    top = kv.right_range()[1]
    assert top == int(top) and 4 <= top <= 10
    assert "window shifts" in kv.title
