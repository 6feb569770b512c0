"""Imports point one way: core <- engine <- backends <- bench / server / docs / tools <- ui / commands, and Qt
only under app/ui.

engine is the engine process (and the protocol both sides share); backends is the client side of the seam,
which runs in the window's, the CLI's and the server's process and starts engine processes.

Every module under app/ is read with `ast` (not imported, so a module that would fail to import is still
checked), and every `import` / `from ... import` in it counts, the ones inside functions too: a lazy import
against the direction is still a dependency against it, only a later one.
"""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"

# Rank of each layer: a module may import its own package and packages of a lower or equal rank. Packages of
# equal rank (bench and server; ui and commands) are clients side by side: `hearth gui` (commands) opens the
# window (ui), and the benchmark may drive a server the same way it drives the engine.
# docs (chat with your documents) runs its embedding model through backends and is used by the CLI, the window
# and the benchmark (`hearth bench docs`), so it sits beside bench and server. tools (MCP servers and the loop
# of approved tool calls) chats through backends and is used by the CLI and the window, so it sits there too.
RANKS = {"core": 0, "engine": 1, "backends": 2, "bench": 3, "server": 3, "docs": 3, "tools": 3,
         "ui": 4, "commands": 4}
QT = ("PySide6", "shiboken6", "pyqtgraph")

# Entry points sit above every layer and may import anything: `python -m app` / the frozen executable
# (__main__), the argparse front (cli), the self-test that exercises every layer at once (selftest), and
# developer tools that are not part of the product (devtools). The package root (`app`, for __version__)
# is below every layer.
ENTRY_POINTS = ("app.__main__", "app.cli", "app.selftest", "app.devtools")

def _module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            # `from app import core` / `from app.core import paths`: the names may be modules themselves.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if base in ("app",)]
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "app" and parts[1] in RANKS else None


def violations() -> list[str]:
    problems = []
    for path in sorted(APP.rglob("*.py")):
        module = _module_name(path)
        if module.startswith(ENTRY_POINTS):
            continue
        mine = _layer(module)
        for line, target in _imports(path, module):
            where = f"{path.relative_to(APP.parent)}:{line}"
            if target.split(".")[0] in QT and mine != "ui":
                problems.append(f"{where} imports {target}: Qt belongs under app/ui")
                continue
            theirs = _layer(target)
            if target.startswith(ENTRY_POINTS):
                problems.append(f"{where} imports the entry point {target}")
            elif mine and theirs and theirs != mine and RANKS[theirs] > RANKS[mine]:
                problems.append(f"{where} ({mine}) imports {target} ({theirs}): against the layer order")
    return problems


def test_imports_follow_the_layer_order():
    problems = violations()
    assert not problems, "\n".join(problems)


def test_the_walk_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from app.ui.app import make_app\n    import PySide6.QtCore\n", encoding="utf-8")
    assert [t for _, t in _imports(source, "app.core.m")] == ["app.ui.app", "PySide6.QtCore"]
