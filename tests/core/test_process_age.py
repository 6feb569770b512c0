"""The process age that `hearth gui --startup-time` and --selftest report from."""

from __future__ import annotations

import subprocess
import sys
import time

CLOCK_TICK_S = 0.011  # Linux records a process's start in clock ticks (1/100 s), plus rounding


def test_a_process_is_never_older_than_the_time_since_it_was_started():
    # psutil's create_time against time.time() counted the boot time's lost fraction of a second too (0.14 s
    # on this project's machine): every start-up figure was that much too long.
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", "from app.core.metrics import seconds_since_process_start as s; "
                           "print(s())"], capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert 0 < float(proc.stdout) <= elapsed + CLOCK_TICK_S
