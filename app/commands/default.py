"""`hearth` without a command: the window, or a terminal chat where no GUI can start."""

from __future__ import annotations

import importlib.util
import os
import sys


def _gui_possible() -> bool:
    if importlib.util.find_spec("app.ui.shell.main_window") is None or importlib.util.find_spec("PySide6") is None:
        return False
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                    or os.environ.get("QT_QPA_PLATFORM"))
    return True


def run_default() -> int:
    if _gui_possible():
        from app.ui.shell.display_check import display_problem

        problem = display_problem()  # Qt's X11 plugin would not load: say what to install, then chat here
        if problem is None:
            from app.commands.gui import open_window

            return open_window()
        print(f"hearth: {problem}", file=sys.stderr)
        if not sys.stdin.isatty():  # started from a menu: nobody to chat with in a terminal
            return 1
        print("hearth: starting the terminal chat instead.", file=sys.stderr)
    import argparse

    from app.commands import chat

    parser = argparse.ArgumentParser(prog="hearth")
    sub = parser.add_subparsers()
    chat.register(sub)
    args = parser.parse_args(["chat"])
    return chat.run(args)
