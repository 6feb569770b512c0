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
        from app.ui.shell.startup_time import run as time_start

        return time_start(args.json)
    return open_window()


def open_window() -> int:
    """The window until it closes (also `hearth` without a command). Its engine starts first, so the engine's
    start and the model's load overlap with Qt's imports and the window's building."""
    from app.backends.supervisor import Supervisor
    from app.core.errors import DependencyMissing
    from app.ui.shell.display_check import display_problem

    problem = display_problem()  # before the engine starts: Qt would abort the process without a word of ours
    if problem:
        raise DependencyMissing(problem)
    engine = Supervisor.for_window()
    from app.ui.shell.app import run_gui

    return run_gui([], engine)
