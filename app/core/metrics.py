"""Process and system memory figures, the same on every platform."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import psutil

_MB = 1024 * 1024


_own: dict[int, psutil.Process] = {}  # this process, by pid (a fork has another)


def rss_mb(pid: int | None = None) -> float:
    """Resident memory in MB of pid, or of this process. The engine asks for its own with every stats event
    (five a second per answer): making a psutil.Process reads /proc twice more each time, so its own is kept."""
    try:
        if pid is None or pid == os.getpid():
            me = os.getpid()
            process = _own.get(me) or _own.setdefault(me, psutil.Process(me))
        else:
            process = psutil.Process(pid)
        return process.memory_info().rss / _MB
    except (psutil.Error, OSError):
        return 0.0


def peak_rss_mb() -> float:
    """Peak resident memory of this process (high-water mark)."""
    if sys.platform.startswith("linux"):
        # ru_maxrss survives fork+exec, so a child would report its parent's peak;
        # VmHWM is this process's own.
        try:
            with open("/proc/self/status", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except (OSError, ValueError):
            pass
    if sys.platform.startswith("win"):
        info = psutil.Process().memory_info()
        return getattr(info, "peak_wset", info.rss) / _MB
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / _MB if sys.platform == "darwin" else peak / 1024


class AnswerPeak:
    """The peak resident memory during one answer, not the process's lifetime high (#49.6: 6,088 MB shown for an
    answer of a 302 MB model, after a bigger model had been loaded in the same engine).

    On Linux the kernel's high-water mark (VmHWM) is reset when an answer starts (/proc/self/clear_refs), and read
    when it ends. Answers that run side by side (parallel slots) each keep the high-water mark as it stood before
    a later one reset it. Where it cannot be reset, the peak is the larger of the memory at the start and at the
    end: it may miss a short rise in between, never report another answer's."""

    _running: list["AnswerPeak"] = []
    _lock = threading.Lock()

    def __init__(self):
        with AnswerPeak._lock:
            self.resets = _reset_peak(AnswerPeak._running)
            self.peak = rss_mb()
            AnswerPeak._running.append(self)

    def end(self) -> float:
        with AnswerPeak._lock:
            if self in AnswerPeak._running:
                AnswerPeak._running.remove(self)
            self.peak = max(self.peak, peak_rss_mb() if self.resets else rss_mb())
        return self.peak


def _reset_peak(running: list[AnswerPeak]) -> bool:
    """Reset this process's high-water mark, after giving its value to the answers still running; False where
    the system cannot (not Linux, or a kernel before 4.0)."""
    if not sys.platform.startswith("linux"):
        return False
    high = peak_rss_mb()
    for other in running:
        other.peak = max(other.peak, high)
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def system_memory_mb() -> dict[str, float]:
    vm = psutil.virtual_memory()
    return {"total_mb": vm.total / _MB, "available_mb": vm.available / _MB, "used_mb": vm.used / _MB}


def seconds_since_process_start() -> float | None:
    """How long this process has run (its start as the OS records it, so interpreter start-up counts)."""
    if sys.platform.startswith("linux"):
        # The kernel's own clock since boot against the start it recorded on that clock, exact to a clock tick.
        # psutil's create_time adds the boot time, which Linux gives in whole seconds: against time.time() that
        # counted up to a second too much (0.14 s on the machine where this was found).
        try:
            fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
            return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass
    try:
        return time.time() - psutil.Process().create_time()
    except psutil.Error:  # the figure is informative only
        return None


def default_threads() -> int:
    # llama.cpp generation is memory-bound; physical cores beat hyperthreads.
    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)
