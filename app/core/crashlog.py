"""Crash logs: an unexpected exception (a bug) leaves its traceback in a file, and the window shows it
at the next start, as qutebrowser does (misc/crashsignal.py).

A bug must never cost the user a silent failure: the CLI prints the log's path instead of a traceback;
the window's exception hook writes the log and tells the user at once when it can, or at the next start
when it cannot (a native crash leaves faulthandler's dump in the same folder).
"""

from __future__ import annotations

import faulthandler
import tempfile
import time
import traceback
from pathlib import Path
from typing import IO

from app.core import paths

_SEEN_SUFFIX = ".seen"
_fault_file: IO | None = None  # faulthandler writes into it from a signal handler: keep it open


def write_crash_log(exc: BaseException) -> Path | None:
    """The traceback of a bug, written to a new crash-*.log; returns its path, or None where no folder took it.

    Never raises: it runs where something already went wrong, often a full or read-only disk, and a second
    error of its own would replace the first with a traceback. The log folder first, then the system's
    temporary folder."""
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}.log"
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # a broken __str__ in the exception itself
        text = f"{type(exc).__name__} (its traceback could not be formatted)\n"
    for folder in (_log_folder, lambda: Path(tempfile.gettempdir())):
        try:
            path = folder() / name
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)
            return path
        except Exception:
            continue
    return None


def _log_folder() -> Path:
    return paths.log_dir()


def enable_fault_log(name: str = "gui") -> Path:
    """Native crashes (a segfault in a library) dump every thread's stack to a file in the log folder."""
    global _fault_file
    path = paths.log_dir() / f"crash-{name}-native.log"
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
