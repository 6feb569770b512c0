"""Run blocking work (disk, network, child processes) off the GUI thread.

`Tasks.run(fn, on_result, on_error)` calls fn on a daemon thread and delivers
its result or its HearthError sentence back on the GUI thread through a
queued signal. Threads end in any order: where a newer run of the same work
replaces an older one (a fit for the runtime now chosen, a search for the text
now typed), `latest=True` drops whatever the older one reports, so a slow old
answer never overwrites a newer one. Progress callbacks go through
`progress(...)`, which is safe to call from the worker. `join()` waits for every task (tests leave no
thread running; the window joins on close).
"""

from __future__ import annotations

import threading
import traceback
from typing import Any, Callable

from PySide6.QtCore import QObject, Signal, Slot

from app.core.errors import HearthError


class Tasks(QObject):
    _finished = Signal(object, object, object)  # callback, value, is_error
    progressed = Signal(str, object)  # task name, payload

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._threads: list[threading.Thread] = []
        # Tasks whose result has not reached the GUI thread yet: a task is busy until its callback ran, since
        # that callback often starts the next piece of work (a listing that selects a model starts inspecting it).
        self._undelivered = 0
        self._closed = False  # the page is closing: a result that arrives now must not start more work
        self._newest: dict[str, object] = {}  # per name, the run of latest=True work whose answer is wanted
        self._finished.connect(self._on_finished)

    def run(self, fn: Callable[[], Any], on_result: Callable[[Any], None] | None = None,
            on_error: Callable[[str], None] | None = None, name: str = "task",
            latest: bool = False) -> threading.Thread | None:
        """latest: a later run under the same name supersedes this one; this one's result and error are
        dropped when they arrive after it started."""
        if self._closed:
            return None
        if latest:
            token = self._newest[name] = object()
            on_result, on_error = (self._if_newest(name, token, callback) for callback in (on_result, on_error))

        def body():
            try:
                value = fn()
            except HearthError as exc:
                self._finished.emit(on_error, str(exc), True)
            except Exception as exc:  # a bug: say so in one line, keep the trace for the log
                traceback.print_exc()
                self._finished.emit(on_error, f"Internal error: {type(exc).__name__}: {exc}", True)
            except BaseException:
                self._finished.emit(None, None, True)  # still delivered: the task is not busy any more
                raise
            else:
                self._finished.emit(on_result, value, False)

        self._undelivered += 1
        self._threads = [t for t in self._threads if t.is_alive()]
        thread = threading.Thread(target=body, name=f"hearth-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def drop(self, name: str) -> None:
        """What the latest=True work of this name still running reports is no longer wanted."""
        self._newest.pop(name, None)

    def _if_newest(self, name: str, token: object, callback: Callable | None) -> Callable | None:
        if callback is None:
            return None
        return lambda value: self._newest.get(name) is token and callback(value)

    def progress(self, name: str, payload: Any) -> None:
        self.progressed.emit(name, payload)

    @Slot(object, object, object)
    def _on_finished(self, callback, value, is_error) -> None:
        try:
            if callback is not None and not self._closed:
                callback(value)
        finally:
            self._undelivered -= 1

    def busy(self) -> bool:
        """Whether any task runs or has a result on its way to the GUI thread."""
        return self._undelivered > 0 or any(t.is_alive() for t in self._threads)

    def close(self, timeout: float = 30.0) -> None:
        """Wait for the running work and drop what it reports afterwards (results queued for the GUI
        thread would otherwise start new work, such as inspecting the selected model, after the window closed)."""
        self._closed = True
        self.join(timeout)

    def join(self, timeout: float = 30.0) -> None:
        for thread in self._threads:
            thread.join(timeout)
        self._threads = [t for t in self._threads if t.is_alive()]
