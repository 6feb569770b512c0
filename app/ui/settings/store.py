"""User settings in one JSON file under the config folder.

The file is the user's to edit, so it is read with suspicion: a value that does not fit its declaration
(app/ui/settings/shape.py, which also brings an older file to this format) is left out (that setting falls back
to its default) instead of stopping the window, and a file that had to be corrected is
kept beside it first, as settings.json.bad-<time>, so nothing the user wrote is lost. What was wrong is in
`problems()` for the window to say. Writes follow every store's rule (app/core/store/jsonstore.py): locked, only
the keys that changed, into the file as it is now, and a failed write is an error with a sentence.
"""

from __future__ import annotations

import json
from typing import Any

from app.core import paths
from app.core.store.jsonstore import (
    StoreError,
    keep_aside,
    locked,
    read_json,
    update_json,
    write_json,
)
from app.ui.settings import shape

_problems: list[str] = []


def problems() -> list[str]:
    """What the last load_settings() found wrong and left out, in words."""
    return list(_problems)


def load_settings() -> dict[str, Any]:
    """The settings as the file holds them, brought to this format (app/ui/settings/shape.py): a key whose value
    does not fit its declaration is left out (that setting takes its default), and the file as it was is kept
    beside it first, so nothing the user wrote is lost."""
    _problems.clear()
    path = paths.settings_file()
    # A file that is not a settings object at all is moved aside and said by the store (app/core/store/jsonstore.py).
    data = shape.migrated(read_json(path, {}, valid=lambda d: isinstance(d, dict)))
    wrong = shape.wrong_keys(data)
    if wrong:
        kept = _reset(path)
        _problems.append(f"{', '.join(wrong)} in {path.name} had values of the wrong type and were reset "
                         + (f"(the file as it was is kept as {kept.name})" if kept else
                            "(the file could not be copied aside, so it is left as it is)"))
        for key in wrong:
            data.pop(key, None)
    if shape.version_of(data) > shape.VERSION:
        _problems.append(f"{path.name} was written by a newer Hearth (settings format {shape.version_of(data)}; "
                         f"this one reads format {shape.VERSION}): the settings it knows are used, and the rest "
                         "of the file is left as it is")
    data.pop(shape.VERSION_KEY, None)  # the file's business, not the window's
    return data


def _reset(path):
    """Copy the file aside byte for byte, then take its wrong values out of it, under the store's lock: the
    user's file is kept whole, and the next start does not say it again. None when the disk cannot take it
    (then the file is left as it is, and nothing the user wrote is lost)."""
    try:
        with locked(path):
            current = read_json(path, {}, valid=lambda d: isinstance(d, dict))
            wrong = shape.wrong_keys(current)
            if not wrong:
                return None
            kept = keep_aside(path, copy=True)
            write_json(path, {k: v for k, v in current.items() if k not in wrong})
            return kept
    except (OSError, StoreError):
        return None


def save_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Write these keys (and only these) into the file as it is now; the other keys stay as another process
    left them. Raises StoreError (a full or read-only disk: StoreWriteError) with a sentence."""
    return update_settings(**settings)


def update_settings(**changes: Any) -> dict[str, Any]:
    """Set these keys, under the lock, in the file as it is now; the settings as they then are."""
    # Every write brings the file to this format first, so a file never carries a version its content is not in.
    written = update_json(paths.settings_file(), lambda data: {**shape.migrated(data), **changes}, {},
                          valid=lambda d: isinstance(d, dict))
    return {k: v for k, v in written.items() if k != shape.VERSION_KEY}


def changed_keys(saved: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """The keys of `now` whose values differ from `saved` (what was last read or written): what a window that
    has held its settings since start-up should write, so that it does not undo what another process changed."""
    return {k: v for k, v in now.items() if k not in saved or _plain(saved[k]) != _plain(v)}


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))
