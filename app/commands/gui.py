"""`hearth gui`: open the window."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("gui", help="open Hearth's window", description="Open Hearth's window (the default "
                       "when `hearth` runs without a command and a display is available).")
    p.add_argument("--startup-time", action="store_true",
                   help="open the window, print how long it took to paint and to have the model ready, and close")
    p.add_argument("--json", action="store_true", help="with --startup-time: the figures as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.startup_time:
        from app.ui.startup_time import run as time_start

        return time_start(args.json)
    from app.engine.supervisor import Supervisor

    engine = Supervisor.for_window()  # first: it starts while Qt and the window import
    from app.ui.app import run_gui

    return run_gui([], engine)
