"""The live monitor: every point in view, cheap redraws, and `hearth bench gui` end to end."""

from __future__ import annotations

import json

import pytest

import numpy as np

from app.ui.monitor.live_plot import LivePlot
from app.ui.monitor.monitor_view import SPANS_S, MonitorView, nice_ceiling


def test_nice_ceiling_rounds_up_to_a_readable_top():
    assert [nice_ceiling(v) for v in (0, 0.4, 1.3, 2.1, 3, 7, 11, 180, 260, 9_999)] == \
        [1, 1, 2, 2.5, 5, 10, 20, 200, 500, 10_000]


def test_graphs_show_every_recent_point_and_rescale_only_in_steps(qtbot):
    monitor = MonitorView()
    qtbot.addWidget(monitor)
    monitor.timer.stop()
    monitor.resize(330, 700)
    monitor.show()
    speed = monitor.plots["speed"]
    ranges = []
    for i in range(100):  # generation speeding up from 20 to 119 tok/s, with memory and context filling
        monitor._on_stats({"gen_tok_s": 20.0 + i, "rss_mb": 180 + i, "n_ctx": 1000, "n_past": 10 * i})
        monitor.redraw()
        ranges.append(tuple(speed.viewRange()[1]))
    x, y = monitor.curves["gen_tok_s"].getData()
    x = x - speed.now  # where the points are drawn: seconds before the plot's "now"
    assert list(y) == [20.0 + i for i in range(100)]
    (x0, x1), (y0, y1) = speed.viewRange()
    # The x axis is "seconds ago" over the shortest span that holds the points, the newest at its right edge.
    assert x0 == -SPANS_S[0] and 0 < x1 < 1 and -1 < x[-1] <= 0 and x[0] >= x0
    assert y0 == 0 and max(y) <= y1 <= 2 * max(y)
    # The y range stepped a few times as the speed grew, not once per point (each step recomputes ticks).
    assert len(set(ranges)) <= 4
    # Between answers a redraw only moves the curves; no curve is given its points again.
    rebuilt, frames = monitor.rebuilt, speed.frames
    monitor.t0 -= 0.5
    monitor.redraw()
    speed.repaint()
    assert monitor.rebuilt == rebuilt
    assert speed.frames == frames  # and the axes, ticks and title are not painted again: only the lines move
    monitor.t0 -= 40  # forty seconds later the span has stepped out to hold them
    monitor.redraw()
    x, _y = monitor.curves["gen_tok_s"].getData()
    assert -41 < x[-1] - speed.now <= -40  # the newest point moved 40 s left
    assert speed.viewRange()[0][0] == -60
    for key, series in (("memory", "engine_mb"), ("kv", "kv_fill")):
        top = monitor.plots[key].viewRange()[1][1]
        assert max(monitor.curves[series].getData()[1]) <= top


@pytest.mark.slow
def test_bench_gui_prints_the_ratio_to_headless(hearth_home, capsys):
    from app.cli import main
    from app.core.chats.store import ChatStore

    mine = ChatStore().create("A chat of the user's")
    assert main(["bench", "gui", "--tokens", "48", "--repeats", "2", "--json"]) == 0
    # The benchmark types into the user's own window: it leaves their chats as they were, and none of its own.
    assert [c.id for c in ChatStore().list()] == [mine]
    out = json.loads(capsys.readouterr().out)
    assert len(out["headless_tok_s"]) == len(out["gui_tok_s"]) == 2
    assert all(v > 0 for v in out["headless_tok_s"] + out["gui_tok_s"])
    assert out["ratio"] == pytest.approx(sorted(out["pair_ratios"])[0] / 2 + sorted(out["pair_ratios"])[1] / 2)
    assert out["graph_redraws"] >= 1 and out["transcript_appends"] >= 2
    # The window's own work per token, in the GUI thread's CPU time (about 0.5 ms here): a figure that grows
    # with a transcript or graph that redraws per token, whatever else the machine runs.
    assert 0 < out["gui_cpu_ms_per_token"] < 20


def test_gpu_memory_gets_a_curve_only_when_layers_are_offloaded(qtbot):
    from app.engine.probes.gpu_memory import device_count, gpu_memory_mb
    from app.ui.shell.status_labels import memory_text

    # This machine has no GPU: the binding to ggml's device list works and finds only the CPU.
    assert device_count() >= 1 and gpu_memory_mb() is None
    monitor = MonitorView()
    qtbot.addWidget(monitor)
    monitor._on_stats({"gen_tok_s": 50.0, "rss_mb": 200.0})
    assert "gpu_mb" not in monitor.curves
    assert memory_text({"rss_mb": 200.0}) == "engine 200 MB"
    # What an offloading engine sends (the figures a CUDA build reports through the same binding).
    stats = {"gen_tok_s": 50.0, "rss_mb": 200.0, "gpu_mb": 5120.0, "gpu_total_mb": 81920.0}
    monitor._on_stats(stats)
    monitor.redraw()
    assert list(monitor.curves["gpu_mb"].getData()[1]) == [5120.0]
    assert monitor.plots["memory"].viewRange()[1][1] >= 5120.0
    # The legend is a line of the title (one inside the plot covered data), the GPU's entry added with its curve.
    title = monitor.plots["memory"].title.replace("&nbsp;", " ")
    assert title.index("engine") < title.index("system used") < title.index("GPU used")
    assert memory_text(stats) == "engine 200 MB · GPU 5120/81920 MB"


def test_draft_graph_says_when_speculation_is_off_and_which_drafter_runs(qtbot, main_window):
    from app.protocol.messages import LoadOptions

    w = main_window
    assert "speculative decoding off" in w.monitor.plots["draft"].title
    options = LoadOptions(model_path=w.bridge.options.model_path, lookup=True)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=60_000) as loaded:
        w.load_model(options)
    assert loaded.args[0]["drafter"] == "lookup"
    title = w.monitor.plots["draft"].title
    assert "lookup" in title and "off" not in title
    # #17: the engine's decision, with its reason, in the monitor and the load pane; the answer's summary
    # says what drafting did instead of "draft acceptance 0%".
    from tests.ui.monitor.test_monitor_states import check_speculation_is_said

    check_speculation_is_said(qtbot, w, loaded.args[0])


def test_a_plot_draws_each_point_where_its_axes_say_and_breaks_the_line_at_a_gap(qtbot):
    plot = LivePlot("Test", 15)
    qtbot.addWidget(plot)
    plot.resize(300, 160)
    plot.show()
    plot.set_y_top(100)
    t = np.arange(0.0, 10.0, 0.1)
    y = np.where((t > 4) & (t < 6), np.nan, 50.0)  # an answer's end: no line across the idle time
    plot.add_curve("speed", "#ff0000").setData(t + 1000, y)
    plot.now = 1010.0  # the newest point is "now"
    image = plot.grab().toImage()
    area = plot.data_area()
    (x0, x1), (y0, y1) = plot.viewRange()

    def red_at(seconds_ago: float) -> bool:
        px = round(area.left() + (-seconds_ago - x0) / (x1 - x0) * area.width())
        py = area.bottom() - (50 - y0) / (y1 - y0) * area.height()
        return any(image.pixelColor(px, round(py) + d).red() > 200 and image.pixelColor(px, round(py) + d).green() < 80
                   for d in (-1, 0, 1))

    assert red_at(1) and red_at(8)  # 50 of 100, halfway up, where the x axis says 1 and 8 s ago
    assert not red_at(5)  # the gap
    assert not red_at(12)  # before the first point
