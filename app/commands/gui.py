"""`hearth gui`: open the window."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("gui", help="open Hearth's window", description="Open Hearth's window (the default "
                       "when `hearth` runs without a command and a display is available).")
    p.set_defaults(func=run)


def run(args) -> int:
    from app.ui.app import run_gui

    return run_gui([])
