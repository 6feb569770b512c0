"""Crash logs: an unexpected exception (a bug) leaves its traceback in a file, and the window shows it
at the next start, as qutebrowser does (misc/crashsignal.py).

A bug must never cost the user a silent failure: the CLI prints the log's path instead of a traceback;
the window's exception hook writes the log and tells the user at once when it can, or at the next start
when it cannot (a native crash leaves faulthandler's dump in the same folder).

Bounded in number and rate, so that a client who can trigger a bug cannot fill the disk with logs (a
request that failed the same way every second wrote a 21 KB log each time; issue 48): at most one log every
MIN_INTERVAL_S per process (the errors in between are counted in the next log, and their callers are given
the last log written), and only the newest KEEP_LOGS crash logs are kept.
"""

from __future__ import annotations

import faulthandler
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import IO

from app.core import paths

_SEEN_SUFFIX = ".seen"
_NATIVE_SUFFIX = "-native.log"  # faulthandler's files, kept open and appended to: never pruned
_fault_file: IO | None = None  # faulthandler writes into it from a signal handler: keep it open
KEEP_LOGS = 20
MIN_INTERVAL_S = 5.0

_lock = threading.Lock()
_last: tuple[float, Path] | None = None  # (time.monotonic(), path) of the last log this process wrote
_unwritten = 0  # errors since then whose tracebacks were not written


def write_crash_log(exc: BaseException) -> Path | None:
    """The traceback of a bug, written to a new crash-*.log; returns its path, or None where no folder took it.
    Within MIN_INTERVAL_S of the last log written, nothing is written: the error is counted in the next log, and
    the last one's path is returned.

    Never raises: it runs where something already went wrong, often a full or read-only disk, and a second error
    of its own would replace the first with a traceback. The log folder first, then the system's temporary
    folder."""
    global _last, _unwritten
    with _lock:
        now = time.monotonic()
        if _last is not None and now - _last[0] < MIN_INTERVAL_S:
            _unwritten += 1
            return _last[1]
        name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}.log"
        try:
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        except Exception:  # a broken __str__ in the exception itself
            text = f"{type(exc).__name__} (its traceback could not be formatted)\n"
        if _unwritten:
            text = (f"({_unwritten} more internal error(s) came after the previous log and were not written: "
                    f"at most one crash log is written every {MIN_INTERVAL_S:g} s.)\n\n{text}")
        for folder in (_log_folder, lambda: Path(tempfile.gettempdir())):
            try:
                path = folder() / name
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write(text)
            except Exception:
                continue
            _last, _unwritten = (now, path), 0
            try:
                _prune(path.parent)
            except Exception:
                pass
            return path
        return None


def _log_folder() -> Path:
    return paths.log_dir()


def _prune(folder: Path) -> None:
    """Keep the newest KEEP_LOGS crash logs (and their seen-markers); never faulthandler's open files."""
    logs = []
    for log in folder.glob("crash-*.log"):
        if log.name.endswith(_NATIVE_SUFFIX):
            continue
        try:
            logs.append((log.stat().st_mtime, log))
        except OSError:
            continue
    for _, old in sorted(logs)[:-KEEP_LOGS]:
        for stale in (old, old.with_name(old.name + _SEEN_SUFFIX)):
            try:
                stale.unlink()
            except OSError:
                pass


def enable_fault_log(name: str = "gui") -> Path:
    """Native crashes (a segfault in a library) dump every thread's stack to a file in the log folder."""
    global _fault_file
    path = paths.log_dir() / f"crash-{name}{_NATIVE_SUFFIX}"
    if _fault_file is None:
        _fault_file = open(path, "a", encoding="utf-8")
        faulthandler.enable(file=_fault_file, all_threads=True)
    return path


def unseen_crash_logs() -> list[Path]:
    """Crash logs written since they were last shown (non-empty ones only), oldest first."""
    folder = paths.log_dir()
    logs = []
    for path in sorted(folder.glob("crash-*.log"), key=lambda p: p.stat().st_mtime):
        marker = path.with_name(path.name + _SEEN_SUFFIX)
        size = path.stat().st_size
        if size and (not marker.exists() or marker.read_text().strip() != str(size)):
            logs.append(path)
    return logs


def mark_seen(path: Path | None) -> None:
    """Remember that the user was shown this log as it is now (a native log that grows shows again)."""
    if path is None:  # no folder took the log (write_crash_log)
        return
    try:
        path.with_name(path.name + _SEEN_SUFFIX).write_text(str(path.stat().st_size))
    except OSError:
        pass
