"""The frozen bundle's entry point: the same `main` as `python -m app` (GUI, CLI and helper processes)."""

import sys

from app.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
