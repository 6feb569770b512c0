"""`python -m app` and the frozen executable both start here.

A frozen bundle has no `python -m`, so it runs its helper processes by
calling itself with a hidden flag (see app/engine/spawn.py).
"""

from __future__ import annotations

import sys


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] in ("--engine-host", "--engine-probe", "--quantize-worker", "--convert-worker"):
        flag, rest = argv[0], argv[1:]
        sys.argv = [sys.argv[0], *rest]
        if flag == "--engine-host":
            from app.engine.host import main as host_main

            return host_main()
        if flag == "--engine-probe":
            from app.engine.probe import _child

            return _child(rest[0])
        if flag == "--convert-worker":
            from app.core.convert_worker import main as convert_main

            return convert_main(rest)
        from app.core.quantize_worker import main as quantize_main

        return quantize_main(rest)
    from app.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
