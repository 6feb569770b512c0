"""The GUI thread never waits on the engine: event-loop stalls during full-speed generation."""

from __future__ import annotations

import os
import time

from PySide6.QtCore import QTimer

from tests.gui.conftest import ask

HEARTBEAT_MS = 10
MAX_STALL_MS = 50


def test_no_event_loop_stall_during_generation(qtbot, main_window):
    w = main_window
    w.chat.sampling_overrides = {"ignore_eos": True}
    gaps: list[float] = []  # wall-clock ms between heartbeats
    busy: list[float] = []  # GUI-thread CPU ms between heartbeats: work the app itself did
    last = [time.perf_counter(), time.thread_time()]

    def beat():
        now, cpu = time.perf_counter(), time.thread_time()
        gaps.append((now - last[0]) * 1000)
        busy.append((cpu - last[1]) * 1000)
        last[:] = [now, cpu]

    timer = QTimer()
    timer.setInterval(HEARTBEAT_MS)
    timer.timeout.connect(beat)
    stats: list[dict] = []
    appends = w.chat.transcript.flushes
    ask(qtbot, w, "Write a long story about the sea.", max_tokens=5, wait=True)  # warm the engine's caches
    last[:] = [time.perf_counter(), time.thread_time()]
    load_before = os.getloadavg()[0]
    redraws = w.monitor.redraws
    w.bridge.stats_received.connect(stats.append)
    timer.start()
    done = ask(qtbot, w, "Write a long story about the sea.", max_tokens=120)
    timer.stop()
    assert done["completion_tokens"] == 120
    assert len(gaps) > 10
    worst_cpu = max(busy)
    assert worst_cpu <= MAX_STALL_MS, f"the GUI thread worked {worst_cpu:.0f} ms without returning to the event loop"
    worst = max(gaps)
    # Wall-clock gaps also include time the OS did not schedule this process at all. On a machine
    # loaded beyond its cores (shared CI runners) that says nothing about the app, so it is only
    # enforced when the machine has room.
    overloaded = max(load_before, os.getloadavg()[0]) > (os.cpu_count() or 1)
    if not overloaded:
        assert worst <= MAX_STALL_MS, f"the event loop stalled for {worst:.0f} ms (heartbeat every {HEARTBEAT_MS} ms)"
    # Tokens were appended in batches (never more than one document append per token), and the
    # graphs kept up with the engine's stats (five a second at full speed; fewer on a slow machine).
    assert w.chat.transcript.flushes - appends <= 120 + 2
    assert len(stats) >= 2
    assert w.monitor.redraws - redraws >= 0.8 * len(stats)
