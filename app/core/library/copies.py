"""Half-written copies: an import's copy goes to a temporary name first (never listed: not *.gguf) and is renamed
once whole; a dead process's leftovers are cleaned before a listing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from app.core import paths

PARTIAL = ".partial-"  # in a copy's temporary name: ".<name>.partial-<pid>", never listed (not *.gguf)


def _copy_partial(source: Path, target: Path) -> Path:
    partial = target.with_name(f".{target.name}{PARTIAL}{os.getpid()}")
    with source.open("rb") as src, partial.open("wb") as out:
        shutil.copyfileobj(src, out, 16 * 2**20)
        out.flush()
        os.fsync(out.fileno())  # on disk before it has the final name
    shutil.copystat(source, partial)
    return partial


def _rename_new(partial: Path, target: Path) -> None:
    """partial becomes target, never over a file that came there meanwhile."""
    try:
        os.link(partial, target)  # fails if target exists: no clobbering
    except FileExistsError:
        raise OSError(f"{target.name} appeared in the folder during the copy") from None
    except OSError:  # a file system without hard links
        if target.exists():
            raise OSError(f"{target.name} appeared in the folder during the copy") from None
        os.replace(partial, target)
        return
    partial.unlink()


def clean_partial_copies(folder: Path | None = None) -> list[Path]:
    """Remove what interrupted copies left (their process is gone); the files removed."""
    folder = folder or paths.models_dir() / "imported"
    removed = []
    try:
        leftovers = [f for f in folder.iterdir() if f.name.startswith(".") and PARTIAL in f.name]
    except OSError:
        return removed
    for leftover in leftovers:
        pid = leftover.name.rsplit(PARTIAL, 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue  # a copy under way in another process
        try:
            leftover.unlink()
            removed.append(leftover)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    import psutil

    return psutil.pid_exists(pid)
