"""Crash logs are bounded in rate (one every MIN_INTERVAL_S, the rest counted in the next) and in number
(the newest KEEP_LOGS): a client that can trigger a bug once a second cannot fill the disk (issue 48)."""

from __future__ import annotations

import os

import pytest

from app.core import paths



from app.core.store import crashlog
@pytest.fixture
def logs(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    monkeypatch.setattr(crashlog, "_last", None)
    monkeypatch.setattr(crashlog, "_unwritten", 0)
    clock = [1000.0]
    monkeypatch.setattr(crashlog.time, "monotonic", lambda: clock[0])
    return paths.log_dir(), clock


def bug(n: int) -> BaseException:
    try:
        raise ValueError(f"bug {n}")
    except ValueError as exc:
        return exc


def test_a_burst_of_errors_writes_one_log_and_the_next_counts_the_rest(logs):
    folder, clock = logs
    first = crashlog.write_crash_log(bug(0))
    for n in range(1, 50):
        clock[0] += 0.05
        assert crashlog.write_crash_log(bug(n)) == first  # the callers name the log there is
    assert list(folder.glob("crash-*.log")) == [first]
    assert "bug 0" in first.read_text() and "bug 1" not in first.read_text()
    clock[0] += crashlog.MIN_INTERVAL_S
    later = crashlog.write_crash_log(bug(99))
    text = later.read_text()
    assert "49 more internal error(s)" in text and "bug 99" in text


def test_only_the_newest_logs_are_kept_with_their_seen_markers_and_never_a_native_one(logs):
    folder, clock = logs
    native = folder / "crash-gui-native.log"
    native.write_text("Fatal Python error")
    os.utime(native, (0, 0))  # the oldest of all
    old = []
    for n in range(crashlog.KEEP_LOGS + 5):
        log = folder / f"crash-2020010{n // 10}-0000{n % 10:02d}.log"
        log.write_text(f"old {n}")
        os.utime(log, (n + 10, n + 10))
        crashlog.mark_seen(log)
        old.append(log)
    clock[0] += 1
    newest = crashlog.write_crash_log(bug(1))
    kept = sorted(p.name for p in folder.glob("crash-*.log") if not p.name.endswith("-native.log"))
    assert len(kept) == crashlog.KEEP_LOGS and newest.name in kept
    assert all(not p.exists() for p in old[:6]) and all(p.exists() for p in old[6:])
    assert not old[0].with_name(old[0].name + ".seen").exists()
    assert native.exists()
