"""`python -m app` and the frozen executable both start here.

A frozen bundle has no `python -m`, so it runs its helper processes by
calling itself with a hidden flag (the table is app.core.proc.ENTRY_POINTS).
"""

from __future__ import annotations

import sys


def main() -> int:
    from app.core.proc import ENTRY_POINTS

    argv = sys.argv[1:]
    if argv and argv[0] in ENTRY_POINTS:
        import importlib

        entry = ENTRY_POINTS[argv[0]]
        rest = argv[1:]
        sys.argv = [sys.argv[0], *rest]
        function = getattr(importlib.import_module(entry.module), entry.function)
        return function(rest) if entry.takes_args else function()
    from app.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
