"""Ids no two entries share, even ignoring case, and finding an entry by what a user types."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from app.core.errors import ModelFileError
from app.core.library.entry import LibraryEntry


def _base_id(entry: LibraryEntry) -> str:
    path = Path(entry.path)
    # An Ollama blob is named by its digest: its name:tag is what the user knows it by.
    return path.stem if path.name.lower().endswith(".gguf") else entry.name


def assign_ids(entries: list[LibraryEntry]) -> None:
    """Give every entry an id no other entry has, even ignoring case (names and stems are not: a linked
    `x-q4_k_m.gguf` and a quantized `x-Q4_K_M.gguf` are two files)."""
    groups: dict[str, list[LibraryEntry]] = {}
    for e in entries:
        groups.setdefault(_base_id(e).casefold(), []).append(e)
    for group in groups.values():
        if len(group) == 1:
            group[0].id = _base_id(group[0])
            continue
        sources = [e.source for e in group]
        for e in group:
            tag = e.source if sources.count(e.source) == 1 else \
                hashlib.sha1(os.path.realpath(e.path).encode()).hexdigest()[:6]
            e.id = f"{_base_id(e)}@{tag}"


class AmbiguousModel(ModelFileError):
    """A name that more than one library entry answers to: refused, never guessed."""

    def __init__(self, message: str, candidates: list[LibraryEntry]):
        super().__init__(message)
        self.candidates = candidates


def _levels(query: str):
    """Predicates from the most exact to the loosest: the id, the name, the file name, the file stem; then
    any of those ignoring case, or the end of a name (`repo/file.gguf` of `owner/repo/file.gguf`)."""
    folded = query.casefold()

    def loose(e: LibraryEntry) -> bool:
        path = Path(e.path)
        return folded in (e.id.casefold(), e.name.casefold(), path.name.casefold(), path.stem.casefold()) \
            or e.name.casefold().endswith("/" + folded)

    return (lambda e: e.id == query, lambda e: e.name == query, lambda e: Path(e.path).name == query,
            lambda e: Path(e.path).stem == query, loose)


def find(query: str, entries: list[LibraryEntry]) -> LibraryEntry | None:
    """The entry `query` names: an exact match always wins over a looser one; two matches at the same level
    are refused with the candidates (AmbiguousModel). None when nothing matches."""
    text = query.strip()
    for matches in _levels(text):
        found = [e for e in entries if matches(e)]
        if len(found) == 1:
            return found[0]
        if found:
            listed = "; ".join(f"{e.id} ({e.path})" for e in found)
            raise AmbiguousModel(f"'{text}' names {len(found)} models in the library: {listed}. "
                                 "Use one of these ids (`hearth models list` shows them) or a path.", found)
    return None
