"""Cheap checks on a model path before llama.cpp sees it, and on what it is loaded with.

llama.cpp prints its reason for refusing a file to its log and returns NULL;
these checks catch the common cases first with a sentence naming the file.
Light on purpose (no gguf, no numpy): the window imports it before its first paint.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path
from typing import BinaryIO

from app.core.errors import ModelFileError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
# GGUF has had three versions; a number far above that is not a newer format but damage (bytes of text or
# of another file where the version belongs): say so instead of "GGUF version 771804700".
PLAUSIBLE_VERSIONS = 16


def version_problem(name: str, version: int) -> str:
    if version == 0 or version > PLAUSIBLE_VERSIONS:
        return (f"{name} is a damaged file: its GGUF header is broken (it claims version {version:,}). "
                "Download or copy it again.")
    return (f"{name} uses GGUF version {version}, which Hearth cannot read (it reads versions "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))}); a newer Hearth may.")


def open_model_file(path: str | Path) -> BinaryIO:
    """The file opened for reading, if it is a regular file; ModelFileError for anything else. A FIFO named
    *.gguf would block a plain open() until something writes to it: `hearth models list` and `hearth serve`
    hung on one in a scanned folder (issue 48). Opened without blocking, then checked on the open file
    itself (a file swapped for a FIFO after a stat() is caught too), then read normally."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise ModelFileError(f"{p} is {kind}, not a GGUF model file.")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_regular_file(path: str | Path) -> bool:
    """Whether the path (followed through links) is a regular file; never opens it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def check_model_file(path: str | Path) -> Path:
    """Return the resolved path, or raise ModelFileError naming the problem."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"Model file not found: {p}")
    if p.is_dir():
        raise ModelFileError(f"{p} is a folder, not a GGUF model file.")
    try:
        size = p.stat().st_size
        with open_model_file(p) as fh:
            head = fh.read(24)
    except OSError as exc:
        raise ModelFileError(f"Cannot read {p}: {exc.strerror or exc}.") from None
    if size == 0:
        raise ModelFileError(f"{p.name} is empty (0 bytes); the download or copy may have failed.")
    if head[:4] != GGUF_MAGIC:
        raise ModelFileError(f"{p.name} is not a GGUF model file (it does not start with 'GGUF').")
    if len(head) < 24:
        raise ModelFileError(f"{p.name} is truncated: it ends inside the GGUF header.")
    (version,) = struct.unpack_from("<I", head, 4)
    if version not in SUPPORTED_VERSIONS:
        raise ModelFileError(version_problem(p.name, version))
    return p.resolve()


def above_trained_context(n_ctx: int | None, n_ctx_train: int | None) -> str | None:
    """The warning for a context above the one the model was trained on (the window, hearth chat and serve say
    the same); None within it."""
    if not (n_ctx and n_ctx_train) or n_ctx <= n_ctx_train:
        return None
    return (f"This model was trained on {n_ctx_train:,} tokens; beyond that its answers usually fall apart, and the "
            "KV cache costs memory for nothing.")
