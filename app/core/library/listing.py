"""Every model Hearth can load, listed (bundled, its own, imported, other apps'), and a name resolved to one."""

from __future__ import annotations

import os
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError, ModelFileError
from app.core.store.jsonstore import is_object, read_json, write_json
from app.core.library.discovery import _first_parts, _walk_gguf, discover
from app.core.library.entry import LibraryEntry
from app.core.library.ids import assign_ids, find
from app.core.library.copies import clean_partial_copies
from app.core.library.index import _index
from app.core.library.metadata import _cache_file, _metadata
from app.core.library.projectors import is_projector, named_like_projector, paired_projector


def _entry(name: str, parts: list[Path], source: str, owned: bool, cache: dict) -> LibraryEntry:
    meta = _metadata(parts[0], cache)
    size = 0
    for p in parts:
        try:
            size += p.stat().st_size
        except OSError:
            pass
    entry = LibraryEntry(name=name, path=str(parts[0]), size_bytes=size, source=source, owned=owned,
                         architecture=meta.get("architecture"), parameters=meta.get("parameters"),
                         quantization=meta.get("quantization"), context_length=meta.get("context_length"),
                         parts=len(parts), error=meta.get("error"))
    paired = _paired(parts[0])
    if paired is not None:
        entry.projector, entry.abilities = str(paired.path), paired.abilities()
    return entry


def _paired(model: Path):
    """The model's projector, looked for only where a file in its folder is named like one (most folders have
    none: their models cost no header read here)."""
    try:
        if not any(named_like_projector(p) for p in model.parent.glob("*.gguf")):
            return None
    except OSError:
        return None
    return paired_projector(model)


def _display_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root)
    # Downloads live in owner__repo/ folders: show owner/repo/file.
    return str(rel).replace("__", "/", 1) if len(rel.parts) > 1 else rel.name


def list_models(discover_others: bool = True, home: Path | None = None) -> list[LibraryEntry]:
    """Every model Hearth can load: bundled, its own, imported, and (read-only) other apps'."""
    cache = read_json(_cache_file(), {}, valid=is_object, quiet=True)  # rebuilt by itself: its damage is no news
    entries: list[LibraryEntry] = []
    seen: set[str] = set()

    def add(entry: LibraryEntry) -> None:
        key = os.path.realpath(entry.path)
        if key not in seen:
            seen.add(key)
            entries.append(entry)

    try:
        from app.core.library.bundled import BUNDLED_NAME, bundled_model_path

        bundled = bundled_model_path()
        if bundled.exists():
            add(_entry(BUNDLED_NAME, [bundled], "bundled", False, cache))
    except HearthError:
        pass

    recorded = {e["path"]: e for e in _index()}
    models = paths.models_dir().resolve()
    clean_partial_copies(models / "imported")
    for first, parts in _first_parts(_walk_gguf(models)):
        if is_projector(first):  # a projector is half of its model's entry, never a model of its own
            continue
        rec = recorded.get(str(first.resolve()))
        source = rec["source"] if rec else "hearth"
        add(_entry(_display_name(first, models), parts, source, True, cache))
    for path, rec in recorded.items():
        p = Path(path)
        if p.exists() and not p.is_relative_to(models) and not is_projector(p):
            add(_entry(p.name, _set_of(p), rec.get("source", "imported"), bool(rec.get("owned")), cache))

    if discover_others:
        for source, name, parts in discover(home):
            if not is_projector(parts[0]):
                add(_entry(name, parts, source, False, cache))
    try:
        write_json(_cache_file(), {k: v for k, v in cache.items() if Path(k).exists()})
    except OSError:
        pass  # a read-only cache folder only costs speed
    assign_ids(entries)
    return entries


def _set_of(path: Path) -> list[Path]:
    """All parts of the split set that `path` starts, or just [path]."""
    return next((parts for first, parts in _first_parts(path.parent.glob("*.gguf")) if first == path), [path])


def entry_for_path(path: str | Path, entries: list[LibraryEntry] | None = None) -> LibraryEntry | None:
    """The library entry of a file, if the library has one."""
    real = os.path.realpath(path)
    return next((e for e in (entries if entries is not None else list_models())
                 if os.path.realpath(e.path) == real), None)


def resolve(query: str | Path, discover_others: bool = True) -> LibraryEntry:
    """A library entry by path, id, name, file name or file stem (see find; the API matches names only, through
    find); 'bundled' is the bundled model."""
    text = str(query).strip()
    if not text:
        raise ModelFileError("Name a model: a path to a GGUF file or a name from `hearth models list`.")
    entries = list_models(discover_others)
    p = Path(text).expanduser()
    if p.exists():
        found = entry_for_path(p, entries)
        if found is not None:
            return found
        entry = _entry(p.name, _set_of(p.resolve()), "file", False, {})
        entry.id = p.stem
        return entry
    if text.casefold() == "bundled":
        found = next((e for e in entries if e.source == "bundled"), None)
    else:
        found = find(text, entries)
    if found is None:
        raise ModelFileError(f"No model named '{text}' in the library; `hearth models list` shows what there is, "
                             "or give a path to a GGUF file.")
    return found
