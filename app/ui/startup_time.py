"""`hearth gui --startup-time`: how long a start takes as a user sees it, measured on the real window.

From the process's start (psutil's create time, so Python's own start-up and the imports count) to the
window's first paint, and to the model being ready to chat (the bundled model, or the last one), then the
window closes. Run it twice on a fresh HEARTH_HOME for the cold and the warm figure.
"""

from __future__ import annotations

import json
import sys
import time

from app.core.metrics import seconds_since_process_start

READY_TIMEOUT_S = 120.0


def measure() -> dict:
    from PySide6.QtCore import QEvent, QObject

    from app.ui.app import make_app
    from app.ui.main_window import MainWindow

    marks: dict[str, float] = {}

    class _FirstPaint(QObject):
        def eventFilter(self, obj, event):  # noqa: N802 (Qt's name)
            if event.type() == QEvent.Paint and "painted_s" not in marks:
                marks["painted_s"] = seconds_since_process_start()
            return False

    app = make_app([])
    marks["qt_ready_s"] = seconds_since_process_start()
    watcher = _FirstPaint()
    app.installEventFilter(watcher)
    window = MainWindow()
    window.bridge.model_loaded.connect(lambda _info: marks.setdefault("model_ready_s", seconds_since_process_start()))
    window.show()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while ("model_ready_s" not in marks or "painted_s" not in marks) and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.002)
    info = window.bridge.info or {}
    window.close()
    app.processEvents()
    marks["model"] = info.get("model")
    marks["extra_bufts_probe"] = (info.get("extra_bufts_probe") or {}).get("detail")
    return marks


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
