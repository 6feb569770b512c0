"""Run the Qt event loop until something happens, without spinning.

For scripts that drive the real window (benchmarks, screenshots): a loop of
processEvents() polls keeps its thread busy on a core the engine's threads
need; on 2 cores that cut generation to ~1 tok/s. A QEventLoop sleeps while
idle, as app.exec() does.
"""

from __future__ import annotations

from PySide6.QtCore import QDeadlineTimer, QEventLoop, QTimer

CHECK_MS = 100  # conditions without a signal are re-checked this often


def wait_until(condition, timeout_s: float, signal=None) -> bool:
    """Process events until condition() holds (checked on `signal` and every CHECK_MS) or the time is up."""
    if condition():
        return True
    loop = QEventLoop()
    deadline = QDeadlineTimer(int(timeout_s * 1000))

    def check(*_args) -> None:
        if condition() or deadline.hasExpired():
            loop.quit()

    timer = QTimer(interval=CHECK_MS, timeout=check)
    if signal is not None:
        signal.connect(check)
    timer.start()
    try:
        loop.exec()
    finally:
        timer.stop()
        if signal is not None:
            signal.disconnect(check)
    return condition()


def pause(seconds: float) -> None:
    """Let the window paint and settle for a moment."""
    wait_until(lambda: False, seconds)
