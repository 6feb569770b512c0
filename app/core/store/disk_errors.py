"""What a full, read-only or forbidden disk means, said once for every writer: which disk, how much room is left.

"[Errno 28] No space left on device" names neither the file nor the disk, and a traceback of it looks like a
bug. Every place that writes the data folder (the JSON stores, the documents' index, the crash log, the CLI's
last catch) turns such an error into one sentence from here, and nothing here writes anything itself.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from pathlib import Path

from app.core.units import human_size

FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
READ_ONLY = (errno.EROFS,)
FORBIDDEN = (errno.EACCES, errno.EPERM)


def kind(exc: BaseException) -> str | None:
    """"full", "read-only" or "forbidden" for an error that is about the disk, not about Hearth; else None."""
    if isinstance(exc, OSError):
        code = exc.errno
        return ("full" if code in FULL else "read-only" if code in READ_ONLY
                else "forbidden" if code in FORBIDDEN else None)
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        if "disk is full" in text:
            return "full"
        if "readonly" in text or "read-only" in text:
            return "read-only"
    return None


def _existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_point(path: Path | str) -> Path:
    """The mount point of the disk that holds path (or would hold it)."""
    at = _existing(Path(path))
    while not os.path.ismount(at) and at != at.parent:
        at = at.parent
    return at


def free_bytes(path: Path | str) -> int | None:
    try:
        return shutil.disk_usage(_existing(Path(path))).free
    except OSError:
        return None


def probe(path: Path | str) -> str | None:
    """The disk's own state, where an error does not say it (SQLite's "unable to open database file"): "read-only"
    for a disk mounted read-only, "full" for one with no room left, else None."""
    at = _existing(Path(path))
    try:
        if os.statvfs(at).f_flag & os.ST_RDONLY:
            return "read-only"
    except (OSError, AttributeError):  # no statvfs (Windows)
        pass
    if free_bytes(at) == 0:
        return "full"
    if not os.access(at if at.is_dir() else at.parent, os.W_OK):
        return "forbidden"
    return None


def describe(path: Path | str, exc: BaseException) -> str:
    """Why nothing could be written at path: the disk (its mount point) and its free space, as a clause."""
    disk = mount_point(path)
    what = kind(exc) or probe(path)
    if what == "full":
        free = free_bytes(path)
        return f"the disk that holds it ({disk}) is full ({human_size(free) if free is not None else '?'} free)"
    if what == "read-only":
        return f"the disk that holds it ({disk}) is read-only"
    if what == "forbidden":
        return "Hearth may not write there (its permissions)"
    return getattr(exc, "strerror", None) or str(exc)


def sentence(path: Path | str, exc: BaseException, what: str | None = None) -> str:
    """'library.json could not be saved in /x/data: the disk that holds it (/x) is full (0 B free).'"""
    path = Path(path)
    return f"{what or path.name} could not be saved in {path.parent}: {describe(path, exc)}."
