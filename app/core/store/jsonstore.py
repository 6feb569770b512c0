"""Every JSON store's one rule (settings, library.json, system_prompts.json, tool-permissions.json, the machine
facts, the bench's quality store):

- a write is a locked read-modify-write: an OS file lock (filelock: flock on POSIX, msvcrt on Windows) on `<file>.lock`,
  the file read again under it, the change applied to what is there now, and the result written to a temp
  file in the same folder, flushed to disk and renamed over the old one, so that two processes lose neither's
  change and a crash mid-write leaves the old file whole;
- a damaged file (not JSON, not UTF-8, or not the shape its store expects) is moved aside byte for byte as
  `<file>.bad-<time>`, said once (`take_notices`, and any listener), and never written over: the store goes
  on from its defaults, and a damaged file that cannot be moved aside is never replaced;
- a store of entries (the library's imports, the allow-list, the presets) names what a sound entry is (`clean`):
  an entry of the wrong shape or type is damage of its own, and costs only itself: the file is copied aside
  byte for byte, the entry taken out of it, the rest read, and it is said once; an entry that could not be
  kept aside stays in the file, which is then never written over;
- a lock held past LOCK_TIMEOUT_S is StoreBusy, never damage;
- a write that fails (a full or read-only disk) is StoreWriteError, one sentence, never swallowed.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from app.core.store.bounded_read import Budget, TooBig, load_json, read_file
from app.core.errors import HearthError

LOCK_TIMEOUT_S = 10.0
# No store Hearth writes comes near this (the largest, the library's metadata cache, is about 300 bytes a model);
# a file past it is damage, and reading it whole would cost its size in memory at every start.
MAX_STORE_BYTES = 16 * 2**20

_notices: list[str] = []
_listeners: list[Callable[[str], None]] = []
_said = threading.Lock()


class StoreError(HearthError, OSError):
    """A JSON store cannot be read or written as asked. An OSError too: callers that let a full or read-only
    disk cost only the memory of a fact (the machine facts) go on catching OSError."""


class StoreBusy(StoreError):
    """Another process holds the store's lock past the wait."""


class StoreWriteError(StoreError):
    """The store could not be written (a full or read-only disk, a folder that is a file)."""


def _say(text: str) -> None:
    with _said:
        listeners = list(_listeners)
        if not listeners:
            _notices.append(text)
    for listener in listeners:
        listener(text)


def take_notices() -> list[str]:
    """What the stores found (damaged files kept aside) since last asked, each said once."""
    with _said:
        out, _notices[:] = list(_notices), []
    return out


def add_listener(listener: Callable[[str], None]) -> None:
    """Call `listener(sentence)` for each notice from now on (the window's message bridge; it may be called
    from any thread); the notices said before it was added are given to it first."""
    with _said:
        _listeners.append(listener)
        waiting, _notices[:] = list(_notices), []
    for text in waiting:
        listener(text)


def remove_listener(listener: Callable[[str], None]) -> None:
    with _said:
        if listener in _listeners:
            _listeners.remove(listener)


def is_object(data: Any) -> bool:
    """The shape of a store kept as one JSON object (settings, the machine facts, the permissions)."""
    return isinstance(data, dict)


def _disk_sentence(path: Path, exc: OSError) -> str:
    from app.core.store.disk_errors import sentence

    return sentence(path, exc)


def _read_raw(path: Path) -> bytes | None:
    """The file's bytes, read within MAX_STORE_BYTES (app/core/store/bounded_read.py); None for a file past it, which
    no store Hearth writes is: damage, kept aside without being read whole. OSError as reading raises it."""
    try:
        return read_file(path, Budget(str(path), MAX_STORE_BYTES))
    except TooBig:
        return None


def _parse(raw: bytes | None, valid: Callable[[Any], bool] | None) -> tuple[bool, Any]:
    if raw is None:
        return False, None
    try:
        data = load_json(raw.decode("utf-8"), "a store")  # nested past reason: damage, never RecursionError
    except (UnicodeDecodeError, ValueError, TooBig):
        return False, None
    return (valid is None or bool(valid(data))), data


def _free_name(path: Path, tag: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.{tag}-{stamp}")
    n = 2
    while target.exists():
        target = path.with_name(f"{path.name}.{tag}-{stamp}-{n}")
        n += 1
    return target


def keep_aside(path: Path, copy: bool = False) -> Path:
    """Move (or copy) `path` aside as `<name>.bad-<time>`, never over an earlier one; the caller holds the lock.
    Raises OSError when the disk cannot take it."""
    target = _free_name(path, "bad")
    if copy:
        target.write_bytes(path.read_bytes())
    else:
        os.rename(path, target)
    return target


class _Unkept(Exception):
    """A damaged file stayed in place: reading goes on from defaults, writing must not replace it."""


_said_for: set[str] = set()


def _say_once(path: Path, text: str) -> None:
    if str(path) not in _said_for:
        _said_for.add(str(path))
        _say(text)


def _damaged(path: Path, raw: bytes, valid, quiet: bool, have_lock: bool) -> tuple[bool, Any]:
    """A damaged file's bytes read: move it aside (under the lock, read again first: another process may have
    just written it whole) and say so once. (True, data) if a sound file was found after all."""
    try:
        with (nullcontext() if have_lock else locked(path)):
            try:
                now = _read_raw(path)
            except FileNotFoundError:
                return False, None  # another process moved it aside already, and said so
            if now != raw:
                ok, data = _parse(now, valid)
                if ok:
                    return True, data
            kept = keep_aside(path)
    except (OSError, StoreBusy) as exc:
        if not quiet:
            _say_once(path, f"{path} is damaged and could not be kept aside ({getattr(exc, 'strerror', None) or exc}); "
                            "its defaults are used, and nothing will be written over it.")
        raise _Unkept() from None
    if not quiet:
        _say(f"{path.name} was damaged (it is not what Hearth wrote there); it is kept as {kept.name}, "
             "and Hearth goes on without it.")
    return False, None


# clean(data) -> (data without its unusable entries, a phrase for each entry taken out): a store's own rule of
# what one sound entry is, so that one bad entry costs itself, never the whole file nor a crash of its reader.
Cleaner = Callable[[Any], "tuple[Any, list[str]]"]


def read_json(path: Path, default: Any = None, valid: Callable[[Any], bool] | None = None,
              quiet: bool = False, clean: Cleaner | None = None) -> Any:
    """The file's data; `default` when it is missing, unreadable or damaged (kept aside: see above).
    valid(data): whether the data has the shape its store needs. quiet: a cache Hearth rebuilds by itself,
    whose damage is no news to the user (it is still moved aside, not read). clean: the store's entries that
    cannot be used are kept aside and left out (see above)."""
    path = Path(path)
    try:
        raw = _read_raw(path)
    except FileNotFoundError:
        return default
    except OSError as exc:
        if not quiet:
            _say_once(path, f"{path} could not be read ({exc.strerror or exc}); its defaults are used.")
        return default
    ok, data = _parse(raw, valid)
    if not ok:
        try:
            ok, data = _damaged(path, raw, valid, quiet, have_lock=False)
        except _Unkept:
            return default
        if not ok:
            return default
    if clean is None:
        return data
    kept, dropped = clean(data)
    if dropped:
        try:
            with locked(path):
                _drop_entries(path, valid, clean)
        except _Unkept:  # said: the file stays as it is, and this reader goes on without them
            pass
        except StoreError as exc:  # busy, or a read-only folder: the next reader tries again
            _say_once(path, f"{path} has {_entries_phrase(dropped)}; Hearth goes on without them. {exc}")
    return kept


def _entries_phrase(dropped: list[str]) -> str:
    shown = "; ".join(dropped[:3]) + (f"; and {len(dropped) - 3} more" if len(dropped) > 3 else "")
    return f"{len(dropped)} entr{'y' if len(dropped) == 1 else 'ies'} Hearth cannot use ({shown})"


def _drop_entries(path: Path, valid, clean: Cleaner) -> Any:
    """Under the lock: the file's data without its unusable entries, the file as it was copied aside first and
    then written without them, said once. _Unkept (said) when the copy cannot be made: nothing is written."""
    try:
        raw = _read_raw(path)
    except FileNotFoundError:
        return None
    ok, data = _parse(raw, valid)
    if not ok:
        return None  # damaged as a whole since it was read: the next read keeps it aside as such
    kept, dropped = clean(data)
    if not dropped:
        return kept
    try:
        copy = keep_aside(path, copy=True)
    except OSError as exc:
        _say_once(path, f"{path} has {_entries_phrase(dropped)}, and it could not be copied aside "
                        f"({exc.strerror or exc}); Hearth goes on without them and will not write over the file.")
        raise _Unkept() from None
    try:
        write_json(path, kept)
    except StoreWriteError as exc:
        _say_once(path, f"{path} has {_entries_phrase(dropped)}; the file as it was is kept as {copy.name}, but it "
                        f"could not be written without them ({exc}); Hearth goes on without them.")
        raise _Unkept() from None
    _say(f"{path.name} had {_entries_phrase(dropped)}; the file as it was is kept as {copy.name}, and Hearth goes "
         "on without them.")
    return kept


def write_json(path: Path, data: Any) -> None:
    """Write the whole file atomically (temp in the same folder, fsync, rename). Raises StoreWriteError."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise StoreWriteError(_disk_sentence(path, exc)) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


@contextmanager
def locked(path: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s lock file (path + ".lock") for as long as the block runs. Waits up to
    `timeout` (LOCK_TIMEOUT_S) for another process's lock, then raises StoreBusy; StoreWriteError when the lock
    file cannot be made (a full or read-only folder). The OS lock is filelock's (flock on POSIX, msvcrt on
    Windows): a fresh lock object each time, so a second holder in this process waits as another process would."""
    from filelock import FileLock, Timeout

    path = Path(path)
    wait = LOCK_TIMEOUT_S if timeout is None else timeout
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock", timeout=wait, thread_local=False)
        lock.acquire(poll_interval=0.02)
    except Timeout:
        raise _busy(path, wait) from None
    except OSError as exc:  # a full or read-only folder: the sentence, not the lock file's errno
        raise StoreWriteError(_disk_sentence(path, exc)) from None
    try:
        yield
    finally:
        lock.release()


def _busy(path: Path, wait: float) -> StoreBusy:
    return StoreBusy(f"{path} is busy: another Hearth process has held it for {wait:.0f} s. Try again.")


def update_json(path: Path, change: Callable[[Any], Any], default: Any = None,
                valid: Callable[[Any], bool] | None = None, quiet: bool = False, clean: Cleaner | None = None) -> Any:
    """Read, change and write a JSON file as one step among processes: `change(data)` returns the new data,
    from what the file holds now (a damaged file is kept aside first, and `default` changed instead).
    Raises StoreWriteError (the disk), StoreBusy (the lock) or StoreError (a damaged file that could not be
    kept aside, which is then not written over)."""
    path = Path(path)
    try:
        with locked(path):
            data = default
            try:
                raw = _read_raw(path)
            except FileNotFoundError:
                raw = None
            if raw is not None:
                ok, parsed = _parse(raw, valid)
                if ok:
                    data = parsed
                else:
                    try:
                        _damaged(path, raw, valid, quiet, have_lock=True)
                    except _Unkept:
                        raise StoreError(f"{path} is damaged and could not be kept aside; Hearth did not write "
                                         "over it. Move it away, then try again.") from None
            if clean is not None and raw is not None and ok:
                try:
                    data = _drop_entries(path, valid, clean)
                except _Unkept:
                    raise StoreError(f"{path} has entries Hearth cannot use, and they could not be kept aside; "
                                     "Hearth did not write over it. Move it away, then try again.") from None
            data = change(data)
            write_json(path, data)
            return data
    except StoreError:  # said already, once
        raise
    except OSError as exc:  # the lock file itself: a read-only or full folder
        raise StoreWriteError(_disk_sentence(path, exc)) from None
