"""`hearth gui --startup-time`: how long a start takes as a user sees it, measured on the real window.

From the process's start (psutil's create time, so Python's own start-up and the imports count) to the
window's first paint, and to the model being ready to chat (the bundled model, or the last one), then the
window closes. Run it twice on a fresh HEARTH_HOME for the cold and the warm figure.

It starts the window as `hearth gui` does (the engine first, then Qt and the window: app.ui.shell.app) and also
reports how: which heavy modules the window process had imported when it painted (the Benchmark page's pyqtgraph,
the API server, llama.cpp... are left until after), and when the engine process started. Before closing it
waits for the pages built after the paint and for a first start's extra-buffer probe to be remembered, so
the next run measures a warm start as a user's second start is.
"""

from __future__ import annotations

import json
import sys
import time

from app.core.metrics import seconds_since_process_start

READY_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 60.0
# Modules a first paint does not need, each a tenth of a second or more to import on a 2-core machine. Of the
# server, its endpoints (the Settings' shape reads app.server.options, its declarations alone).
HEAVY_MODULES = ("llama_cpp", "numpy", "pyqtgraph", "huggingface_hub", "httpx", "keyring", "starlette", "uvicorn",
                 "fastapi", "jinja2", "app.server.openai", "app.backends.remote", "app.bench")


def heavy_modules_loaded() -> list[str]:
    return [name for name in HEAVY_MODULES if name in sys.modules]


def measure() -> dict:
    from app.backends.supervisor import Supervisor

    engine = Supervisor.for_window()
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication

    from app.ui.shell.app import make_app, open_window

    marks: dict = {}

    class _FirstPaint(QObject):
        def eventFilter(self, obj, event):  # noqa: N802 (Qt's name)
            if event.type() == QEvent.Paint and "painted_s" not in marks:
                marks["painted_s"] = seconds_since_process_start()
                marks["heavy_modules_at_paint"] = heavy_modules_loaded()
                QApplication.instance().removeEventFilter(self)  # a filter on every event costs the rest
            return False

    app = make_app([])
    marks["qt_ready_s"] = seconds_since_process_start()
    probe_before = _remembered_probe()
    watcher = _FirstPaint()
    app.installEventFilter(watcher)
    window = open_window(engine)
    marks["window_built_s"] = seconds_since_process_start()
    window.bridge.model_loaded.connect(lambda _info: marks.setdefault("model_ready_s", seconds_since_process_start()))
    window.show()
    _wait(app, lambda: "model_ready_s" in marks and "painted_s" in marks, READY_TIMEOUT_S)
    info = window.bridge.info or {}
    marks["engine_started_s"] = _started_s(window.bridge.pid)
    _wait(app, window.pages.all_built, READY_TIMEOUT_S)
    marks["pages_built_s"] = seconds_since_process_start()
    marks["heavy_modules_at_end"] = heavy_modules_loaded()
    probe = info.get("extra_bufts_probe") or {}
    if probe.get("background"):  # a first start: the next one should find the answer, as a user's does
        _wait(app, lambda: _remembered_probe() != probe_before, PROBE_TIMEOUT_S)
    window.close()
    app.processEvents()
    marks["model"] = info.get("model")
    marks["extra_bufts_probe"] = probe.get("detail")
    return marks


def _wait(app, done, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.002)


def _started_s(pid: int | None) -> float | None:
    """When the engine process was created, in seconds after this one was (None without one)."""
    import psutil

    try:
        return psutil.Process(pid).create_time() - psutil.Process().create_time() if pid else None
    except psutil.Error:
        return None


def _remembered_probe():
    from app.core.store.jsonstore import is_object, read_json
    from app.core.paths import machine_facts_file

    return read_json(machine_facts_file(), {}, valid=is_object).get("extra_bufts")


def run(as_json: bool = False) -> int:
    marks = measure()
    if as_json:
        print(json.dumps(marks, indent=2))
        return 0
    painted, ready = marks.get("painted_s"), marks.get("model_ready_s")
    print(f"window painted {painted:.2f} s after the process started" if painted else "window never painted")
    print(f"model ready {ready:.2f} s after the process started ({marks.get('model')})" if ready
          else f"model not ready within {READY_TIMEOUT_S:.0f} s")
    return 0 if painted and ready else 1


if __name__ == "__main__":
    sys.exit(run("--json" in sys.argv))
