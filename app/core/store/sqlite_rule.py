"""The stores' rule for SQLite files (the chat history, the API's stored responses): a lock another program holds
is "busy", never damage; only what says the bytes are wrong (SQLITE_CORRUPT, SQLITE_NOTADB, a failed
quick_check) moves a file aside, with its -wal and -shm, and the file aside is never written into. A file whose
schema version (PRAGMA user_version) is newer than the store's own was written by a newer Hearth: it is refused
with a sentence and never opened for writing (an older schema applied over it could damage what it keeps)."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path


class IntegrityFailure(sqlite3.DatabaseError):
    """PRAGMA quick_check found damage in a file that opened."""


class TooNew(sqlite3.DatabaseError):
    """The file's schema is newer than this Hearth knows: neither damage nor busy, and never written."""


def schema_version(schema: str) -> int:
    """The version a store's schema script sets (its `PRAGMA user_version = N`): declared there, once."""
    found = re.search(r"PRAGMA\s+user_version\s*=\s*(\d+)", schema, re.I)
    return int(found.group(1)) if found else 0


def refuse_newer(db: sqlite3.Connection, path: Path, schema: str) -> None:
    """TooNew, in a sentence naming the version, when the file was written by a newer Hearth."""
    found, known = db.execute("PRAGMA user_version").fetchone()[0], schema_version(schema)
    if found > known:
        raise TooNew(f"{path} was written by a newer version of Hearth (its format {found}; this version reads up "
                     f"to {known}). Update Hearth to use it; it was left untouched.")


def busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "database is locked" in str(exc) or "database table is locked" in str(exc)


def damaged(exc: sqlite3.Error) -> bool:
    """Only what says the bytes are wrong: a busy lock, a missing folder, a read-only or full disk leave the file
    where it is (they say nothing about its contents)."""
    if isinstance(exc, IntegrityFailure):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    text = str(exc)
    return "file is not a database" in text or "malformed" in text


def open_checked(path: Path, schema: str, busy_timeout: float, check_same_thread: bool = True) -> sqlite3.Connection:
    """The file opened in WAL mode with its schema, after a quick_check: damage inside a file does not always stop
    it from opening, so look before writing into it."""
    db = sqlite3.connect(str(path), timeout=busy_timeout, check_same_thread=check_same_thread)
    try:
        refuse_newer(db, path, schema)  # before anything is written into it
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(schema)
        verdict = db.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise IntegrityFailure(f"integrity check: {verdict}")
    except BaseException:
        db.close()
        raise
    return db


def move_aside(path: Path) -> Path:
    """The damaged file (and its -wal and -shm) renamed to <name>.damaged-<time>; returns the new name.
    Raises OSError where the folder cannot be written."""
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        part = Path(str(path) + suffix)
        if part.exists():
            part.replace(Path(str(aside) + suffix))
    return aside
