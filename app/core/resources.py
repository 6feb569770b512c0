"""Find files of the top-level resources/ folder, wherever Hearth runs from.

From a source checkout or an editable install it is the repository's
resources/; in a wheel it is installed as the package app._resources; in a
PyInstaller bundle it lies under the bundle's resources/.
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.core.errors import HearthError


def resources_dir() -> Path:
    candidates = []
    base = getattr(sys, "_MEIPASS", None)
    if base:
        candidates.append(Path(base) / "resources")
    candidates.append(Path(__file__).resolve().parents[2] / "resources")
    candidates.append(Path(__file__).resolve().parents[1] / "_resources")
    for folder in candidates:
        if folder.is_dir():
            return folder
    raise HearthError("Hearth's resources folder is missing; reinstall Hearth.")


def resource_path(name: str) -> Path:
    return resources_dir() / name
