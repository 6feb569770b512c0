"""Importing a model: linked where it is, or copied or moved into the models folder under a temporary name
first, so a kill mid-copy never leaves a half file listed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError, ModelFileError
from app.core.gguf.info import read_gguf_info
from app.core.library.copies import _copy_partial, _rename_new, clean_partial_copies
from app.core.library.entry import IMPORT_MODES, LibraryEntry
from app.core.library.index import register
from app.core.library.listing import _set_of, resolve
from app.core.library.projectors import is_projector, paired_projector


def import_model(path: str | Path, mode: str = "link") -> LibraryEntry:
    """Add a GGUF file (all parts of a split set) to the library: link (record in place), copy or move."""
    if mode not in IMPORT_MODES:
        raise HearthError(f"Unknown import mode '{mode}'; use {', '.join(IMPORT_MODES)}.")
    src = Path(path).expanduser()
    info = read_gguf_info(src)  # refuses anything that is not a sound GGUF, with its reason
    if is_projector(src):
        raise HearthError(f"{src.name} is a projector (the part of a model that sees or hears), not a model: import "
                          "the model that lies beside it, and its projector comes with it.")
    src = src.resolve()
    parts = _set_of(src)
    if info.split_count > 1 and len(parts) != info.split_count:
        raise ModelFileError(f"{src.name} is part 1 of {info.split_count} files, but only {len(parts)} are "
                             "next to it; import needs all parts in one folder.")
    models = paths.models_dir().resolve()
    if mode == "link" or src.is_relative_to(models):
        register(src, "imported", owned=src.is_relative_to(models))
        return resolve(src, discover_others=False)
    dest_dir = models / "imported"
    dest_dir.mkdir(parents=True, exist_ok=True)
    # Named .gguf whatever the source was called: the file was judged by its content above, and the library
    # lists its own folder by that extension (a copy without it would be invisible and impossible to remove).
    targets = [dest_dir / (p.name if p.name.lower().endswith(".gguf") else p.name + ".gguf") for p in parts]
    # The projector comes along, named after the model: the imported folder holds many models, and the pairing
    # picks the projector whose name shares the model's.
    projector = paired_projector(src)
    if projector is not None:
        parts = [*parts, projector.path]
        targets = [*targets, dest_dir / f"mmproj-{targets[0].stem}.gguf"]
    clash = next((t for t in targets if t.exists()), None)
    if clash:
        raise HearthError(f"{clash.name} is already in Hearth's models folder; remove it first "
                          "(hearth models rm) or rename the file.")
    needed = sum(p.stat().st_size for p in parts)
    if mode == "copy" and shutil.disk_usage(dest_dir).free < needed:
        raise HearthError(f"Not enough disk space to copy {src.name} ({needed / 2**30:.2f} GB) into {dest_dir}.")
    done: list[Path] = []
    partials: list[Path] = []
    clean_partial_copies(dest_dir)
    try:
        if mode == "copy":
            # Each part copied under a temporary name first, then renamed: an interrupted copy (a kill, a power
            # cut) is never a file under the final name, listed as a model and refused as a duplicate.
            for p, t in zip(parts, targets):
                partials.append(_copy_partial(p, t))
            for partial, t in zip(partials, targets):
                _rename_new(partial, t)
                done.append(t)
        else:
            for p, t in zip(parts, targets):
                try:
                    os.rename(p, t)  # the same file system: at once, and whole
                except OSError:  # another one: copied as above, then the source removed
                    partial = _copy_partial(p, t)
                    partials.append(partial)
                    _rename_new(partial, t)
                    p.unlink()
                done.append(t)
    except OSError as exc:
        if mode == "copy":
            for t in done + partials:
                t.unlink(missing_ok=True)
        raise HearthError(f"Could not {mode} {src.name} into {dest_dir}: {exc.strerror or exc}.") from None
    register(targets[0], "imported", owned=True)
    return resolve(targets[0], discover_others=False)
