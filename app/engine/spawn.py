"""How to start Hearth's helper processes, from source or from a frozen bundle.

A PyInstaller bundle has no `python -m`; there the executable itself takes a
hidden flag and runs the same entry point (see app/__main__.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Hidden flags of the frozen executable, mapped to the module they run.
ENTRY_FLAGS = {
    "app.engine.host": "--engine-host",
    "app.engine.probe": "--engine-probe",
    "app.core.quantize_worker": "--quantize-worker",
    "app.core.convert_worker": "--convert-worker",
    "app.bench.matrix": "--bench-matrix-worker",
}


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def child_command(module: str, *args: str) -> list[str]:
    if is_frozen():
        return [sys.executable, ENTRY_FLAGS[module], *args]
    return [sys.executable, "-m", module, *args]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if not is_frozen():
        # Make `app` importable in the child even when Hearth runs from a source tree.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env
