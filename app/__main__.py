"""`python -m app` and the frozen executable both start here.

A frozen bundle has no `python -m`, so it runs its helper processes by
calling itself with a hidden flag (see app/engine/spawn.py).
"""

from __future__ import annotations

import sys


# Hidden flag -> (module, function, whether it takes the remaining arguments).
# The modules are the keys of app.engine.spawn.ENTRY_FLAGS.
_ENTRY_POINTS = {
    "--engine-host": ("app.engine.host", "main", False),
    "--engine-probe": ("app.engine.probe", "child_main", True),
    "--quantize-worker": ("app.core.quantize_worker", "main", True),
    "--convert-worker": ("app.core.convert_worker", "main", True),
    "--bench-matrix-worker": ("app.bench.matrix", "worker_main", False),
}


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] in _ENTRY_POINTS:
        import importlib

        module, function, takes_args = _ENTRY_POINTS[argv[0]]
        rest = argv[1:]
        sys.argv = [sys.argv[0], *rest]
        entry = getattr(importlib.import_module(module), function)
        return entry(rest) if takes_args else entry()
    from app.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
