"""A bug in the window is written down and told, never lost: the exception hook and the next start."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from app.core import paths
from app.ui.shell import crash_report


@pytest.mark.qt_no_exception_capture
def test_an_exception_in_a_slot_leaves_a_crash_log_and_a_sentence(qtbot, monkeypatch):
    from PySide6.QtCore import QTimer

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    said: list[str] = []
    crash_report.install(said.append)

    def broken_slot():
        raise ValueError("a bug in a slot")

    QTimer.singleShot(0, broken_slot)
    qtbot.waitUntil(lambda: bool(said), timeout=5_000)
    logs = sorted(paths.log_dir().glob("crash-*.log"))
    assert len(logs) == 1 and "broken_slot" in logs[0].read_text() and "a bug in a slot" in logs[0].read_text()
    assert said == [f"Hearth hit an internal error (ValueError: a bug in a slot); details are in {logs[0]}."]
    # It was shown already: the next start does not name it again.
    assert crash_report.report_previous(said.append) == [] and len(said) == 1

    worker = threading.Thread(target=lambda: 1 / 0)
    worker.start()
    worker.join()
    assert len(said) == 2 and "ZeroDivisionError" in said[1]


def test_a_native_crash_is_named_once_at_the_next_start(hearth_home):
    # A real segfault in a process that enabled the fault log as the window does.
    code = ("from app.core.store.crashlog import enable_fault_log; enable_fault_log('gui'); "
            "import ctypes; ctypes.string_at(0)")
    crashed = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert crashed.returncode != 0
    said: list[str] = []
    logs = crash_report.report_previous(said.append)
    assert [p.name for p in logs] == ["crash-gui-native.log"] and "Fatal Python error" in logs[0].read_text()
    assert said == [f"Hearth stopped unexpectedly last time; the report is in {logs[0]}."]
    assert crash_report.report_previous(said.append) == []
