"""Imports point one way: core <- protocol <- engine <- backends <- bench / server / docs / tools <- ui / commands,
Qt only under app/ui, and llama.cpp only in the engine process.

protocol is what both sides of the seam share (messages, option fields, tool-call and grammar formats); engine
is the engine process; backends is the client side of the seam, which runs in the window's, the CLI's and the
server's process and starts engine processes.

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
RANKS = {"core": 0, "protocol": 1, "engine": 2, "backends": 3, "bench": 4, "server": 4, "docs": 4, "tools": 4,
         "ui": 5, "commands": 5}
QT = ("PySide6", "shiboken6", "pyqtgraph")

# llama.cpp runs in the engine process and in children started for one job, never in the window's, the
# server's or the CLI's own process, where its crash would take them down. The children: the quantizer and
# converter workers (app/core), the benchmarks, which measure llama.cpp in the process they time (`hearth
# bench`, its worker), and `hearth doctor`, which prints llama.cpp's own report of this build and loads no
# model. Anything else that needs llama.cpp asks the engine or a child.
LLAMA = "llama_cpp"
LLAMA_ALLOWED = ("app.engine", "app.bench", "app.core.making.quantize_worker", "app.core.making.convert_worker",
                 "app.commands.doctor", "app.commands.bench")

# Entry points sit above every layer and may import anything: `python -m app` / the frozen executable
# (__main__), the argparse front (cli) and the self-test that exercises every layer at once (selftest). The
# package root (`app`, for __version__) is below every layer.
ENTRY_POINTS = ("app.__main__", "app.cli", "app.selftest")

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
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names
                      if base == "app" or base.startswith("app.")]
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
            if target.split(".")[0] == LLAMA and not module.startswith(LLAMA_ALLOWED):
                problems.append(f"{where} imports {target}: llama.cpp runs only in the engine process")
                continue
            theirs = _layer(target)
            if target.startswith(ENTRY_POINTS):
                problems.append(f"{where} imports the entry point {target}")
            elif mine and theirs and theirs != mine and RANKS[theirs] > RANKS[mine]:
                problems.append(f"{where} ({mine}) imports {target} ({theirs}): against the layer order")
    return problems


def llama_reachers() -> list[str]:
    """Modules outside LLAMA_ALLOWED from which a chain of imports (lazy ones too) reaches llama_cpp."""
    graph, direct = {}, set()
    for path in sorted(APP.rglob("*.py")):
        module = _module_name(path)
        targets = {target for _, target in _imports(path, module)}
        if any(t.split(".")[0] == LLAMA for t in targets):
            direct.add(module)
        graph[module] = {t for t in targets if t.startswith("app.")}
    reaches = {}

    def reach(module: str, seen: set) -> list[str] | None:
        if module in direct:
            return [module]
        for target in sorted(graph.get(module, ())):
            if target in seen:
                continue
            seen.add(target)
            chain = reach(target, seen)
            if chain:
                return [module, *chain]
        return None

    for module in graph:
        if not module.startswith(LLAMA_ALLOWED) and not module.startswith(ENTRY_POINTS):
            chain = reach(module, {module})
            if chain:
                reaches[module] = " -> ".join(chain) + " -> llama_cpp"
    return [f"{m}: {c}" for m, c in sorted(reaches.items())]


def test_llama_cpp_is_reached_only_from_the_engine_process():
    """The window, the server and the CLI reach llama.cpp only through child processes (named by string in
    app/core/proc.py): no chain of imports, lazy ones included, leads from them to llama_cpp."""
    problems = llama_reachers()
    assert not problems, "\n".join(problems)


def test_imports_follow_the_layer_order():
    problems = violations()
    assert not problems, "\n".join(problems)


def test_the_walk_catches_llama_cpp_outside_the_engine(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    import llama_cpp\n", encoding="utf-8")
    found = [t for _, t in _imports(source, "app.ui.m")]
    assert found == ["llama_cpp"] and not "app.ui.m".startswith(LLAMA_ALLOWED)


def test_the_walk_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from app.ui.shell.app import make_app\n    import PySide6.QtCore\n", encoding="utf-8")
    assert [t for _, t in _imports(source, "app.core.m")] == ["app.ui.shell.app", "app.ui.shell.app.make_app", "PySide6.QtCore"]


def import_cycles() -> list[list[str]]:
    """Groups of modules that import each other round in a circle (lazy imports count: a circle drawn inside a
    function is still one the reader has to hold in mind), found as strongly connected components."""
    modules = {_module_name(path): path for path in sorted(APP.rglob("*.py"))}
    graph = {m: sorted({t for _, t in _imports(path, m) if t in modules and t != m and modules[t].name != "__init__.py"})
             for m, path in modules.items()}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's algorithm; app/ is a few hundred modules, recursion is shallow
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_round_in_a_circle():
    cycles = import_cycles()
    assert not cycles, "\n".join(" <-> ".join(group) for group in cycles)
