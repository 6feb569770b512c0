"""The window's exception hook: a bug in a slot is written to a crash log and told to the user.

Without a hook, an exception raised in a Qt slot is printed to a console nobody sees and the window
carries on as if nothing happened. With it, the traceback goes to a crash log (app.core.store.crashlog), the
status bar names the file, and a log the user has not seen yet (a native crash leaves one through
faulthandler) is named once at the next start.
"""

from __future__ import annotations

import sys
import threading
from typing import Callable

from app.core.store.crashlog import mark_seen, unseen_crash_logs, write_crash_log

Show = Callable[[str], None]


def install(show: Show) -> None:
    """Route uncaught exceptions on any thread to a crash log and to show(sentence); show must be
    safe to call from any thread (the window passes a queued signal's emit)."""
    def report(exc: BaseException) -> None:
        try:
            path = write_crash_log(exc)
        except OSError:
            show(f"Hearth hit an internal error ({type(exc).__name__}: {exc}); its log could not be written.")
            return
        mark_seen(path)
        show(f"Hearth hit an internal error ({type(exc).__name__}: {exc}); details are in {path}.")

    def excepthook(kind, exc, tb):
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, exc, tb)
            return
        report(exc.with_traceback(tb))

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            report(args.exc_value)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook


def report_previous(show: Show) -> list:
    """Name the crash logs written since the last start (once each)."""
    logs = unseen_crash_logs()
    if logs:
        more = f" (and {len(logs) - 1} more in that folder)" if len(logs) > 1 else ""
        show(f"Hearth stopped unexpectedly last time; the report is in {logs[-1]}{more}.")
        for path in logs:
            mark_seen(path)
    return logs
