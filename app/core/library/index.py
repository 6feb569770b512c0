"""The index of imports: the files the user imported (linked, copied or moved), kept in library.json under
the one rule of the JSON stores; an entry of the wrong shape costs only itself."""

from __future__ import annotations

import os
import time
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError
from app.core.store.jsonstore import read_json, update_json
from app.core.library.entry import OWNED_SOURCES


def index_file() -> Path:
    return paths.data_dir() / "library.json"


def _index() -> list[dict]:
    data = read_json(index_file(), {}, valid=_index_shape, clean=_sound_entries)
    return list(data.get("models", [])) if isinstance(data, dict) else []


def _update_index(change) -> None:
    """Change the index's entries as one locked step: two processes importing at once both keep theirs."""
    update_json(index_file(), lambda data: {"models": change(list(data.get("models", [])))}, {},
                valid=_index_shape, clean=_sound_entries)


def _index_shape(data) -> bool:
    """What library.json must be: anything else is damage, kept aside and said (app/core/store/jsonstore.py), and the
    next import does not write over it."""
    return isinstance(data, dict) and isinstance(data.get("models", []), list)


# An entry's fields and the types its readers take for granted (a path that is a number, a source that is an
# object, crashed `models list` and `models import`).
_ENTRY_FIELDS = {"path": str, "source": str, "owned": bool, "added": (int, float)}


def _entry_problem(entry) -> str | None:
    """Why one index entry cannot be used, as a phrase; None for a sound one."""
    if not isinstance(entry, dict):
        return f"an entry is {_json_kind(entry)}, not an object"
    for key, kind in _ENTRY_FIELDS.items():
        if key in entry and _wrong_type(entry[key], kind):
            whose = "an entry's" if key == "path" else f"the entry of {str(entry.get('path'))[:80]!r}:"
            return f"{whose} '{key}' is {_json_kind(entry[key])}"
    path = entry.get("path")
    if not path or "\0" in path or not os.path.isabs(path):
        return f"'path' {str(path)[:80]!r} is not a file's full path"
    if entry.get("source", "imported") not in OWNED_SOURCES:
        return f"'source' of {path[:80]!r} is {entry['source'][:40]!r}, not one of {', '.join(OWNED_SOURCES)}"
    return None


def _json_kind(value) -> str:
    """What a JSON value is, in words (a number, an object), for a sentence about an entry."""
    for kind, words in ((bool, "true or false"), (str, "text"), ((int, float), "a number"), (dict, "an object"),
                        (list, "a list")):
        if isinstance(value, kind):
            return words
    return "null"


def _wrong_type(value, kind) -> bool:
    # JSON's true is a Python int too: a count or a time that is true is as wrong as one that is text.
    return not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))


def _sound_entries(data) -> tuple[dict, list[str]]:
    """The index without the entries it cannot use (jsonstore's clean), and a phrase for each one left out."""
    entries = data.get("models", [])
    problems = [_entry_problem(e) for e in entries]
    return ({**data, "models": [e for e, problem in zip(entries, problems) if problem is None]},
            [problem for problem in problems if problem is not None])


def register(path: str | Path, source: str, owned: bool) -> None:
    """Record a file outside the models folder (an import link, a quantized --out file)."""
    p = str(Path(path).resolve())
    _update_index(lambda entries: [e for e in entries if e["path"] != p]
                  + [{"path": p, "source": source, "owned": owned, "added": time.time()}])


def _forget(path: str) -> None:
    _update_index(lambda entries: [e for e in entries if e["path"] != path])


def missing_records() -> list[tuple[str, str]]:
    """(path, source) of each recorded import whose file is gone (moved, deleted, an unmounted disk): the
    library keeps them, marked, until the user locates the file or removes the record (#49.8)."""
    return [(e["path"], e.get("source", "imported")) for e in _index() if not Path(e["path"]).exists()]


def forget_missing(path: str | Path) -> None:
    """Remove a record whose file is gone; a file that is there is never forgotten this way."""
    if Path(path).exists():
        raise HearthError(f"{path} is there; remove it from the library as any other model.")
    _forget(str(path))
