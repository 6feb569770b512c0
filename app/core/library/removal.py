"""Removing a model: what Hearth owns is deleted, what it only links or found elsewhere is forgotten."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError
from app.core.units import human_size
from app.core.library.entry import APP_NAMES, DISCOVERED_SOURCES, LibraryEntry
from app.core.library.index import _forget, _index
from app.core.library.listing import _set_of, resolve
from app.core.library.projectors import named_like_projector, paired_projector


@dataclass
class Removal:
    """What removing an entry does, said before it is done: delete Hearth's own files, or only forget a linked
    import (its file stays where it is)."""
    entry: LibraryEntry
    files: list[tuple[str, int]]  # (path, bytes) of the files that will be deleted; empty when forgetting
    forgotten: bool  # the entry is only removed from the index (a linked import)
    deleted: list[str] = field(default_factory=list)  # files deleted, once carried out

    def describe(self) -> str:
        if self.forgotten:
            return f"{self.entry.id}: the link to {self.entry.path} is removed from the library; the file stays."
        total = sum(size for _, size in self.files)
        listed = ", ".join(path for path, _ in self.files)
        return f"{self.entry.id}: {listed} ({human_size(total)}) will be deleted from disk."


def plan_removal(query: str | Path) -> Removal:
    """What `remove_model` would do to the entry `query` names; refuses what Hearth may not remove."""
    entry = resolve(query)
    if entry.source == "bundled":
        raise HearthError("The bundled model is part of Hearth and cannot be removed.")
    if entry.source in DISCOVERED_SOURCES:
        raise HearthError(f"{entry.name} belongs to {APP_NAMES[entry.source]}; Hearth only lists it and never "
                          "deletes other apps' files.")
    real = str(Path(entry.path).resolve())
    if not entry.owned:
        if entry.source == "file" or real not in {e["path"] for e in _index()}:
            raise HearthError(f"{entry.path} is not in Hearth's library, so Hearth will not delete it.")
        return Removal(entry, [], True)
    files = []
    for part in [*_set_of(Path(entry.path)), *_projector_alone(Path(entry.path))]:
        try:
            files.append((str(part), part.lstat().st_size))  # a link in the models folder: the link's own size
        except OSError:
            continue
    return Removal(entry, files, False)


def _projector_alone(model: Path) -> list[Path]:
    """The model's projector, where no other model in its folder pairs with it too (a repo's F16 and Q4_K_M
    share one): removed with the model, never left behind alone."""
    paired = paired_projector(model)
    if paired is None:
        return []
    for other in model.parent.glob("*.gguf"):
        if other != model and not named_like_projector(other) and other not in _set_of(model):
            theirs = paired_projector(other)
            if theirs is not None and theirs.path == paired.path:
                return []
    return [paired.path]


def carry_out(removal: Removal) -> Removal:
    """Do what plan_removal said, to exactly the files it named."""
    entry = removal.entry
    real = str(Path(entry.path).resolve())
    for path, _size in removal.files:
        try:
            Path(path).unlink()  # a symbolic link is unlinked, never the file it points to
            removal.deleted.append(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise HearthError(f"Could not delete {path}: {exc.strerror or exc}.") from None
    _forget(real)
    if removal.forgotten:
        return removal
    folder = Path(entry.path).parent
    models = paths.models_dir().resolve()
    if folder.resolve() != models and folder.resolve().is_relative_to(models) and not any(folder.iterdir()):
        folder.rmdir()  # an emptied owner__repo folder
    return removal


def remove_model(query: str | Path) -> Removal:
    """Delete a model Hearth owns; forget a linked import (its file stays); refuse anything else."""
    return carry_out(plan_removal(query))
