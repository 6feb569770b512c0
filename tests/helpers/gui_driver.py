"""A real `hearth gui` process, driven as a user would drive it: `python -m tests.helpers.gui_driver "MESSAGE" [MODEL
IMAGE]`.

It runs the real command (app.cli.main(["gui"])); once the window's model is ready (MODEL loaded, where named, and
IMAGE attached as a drop attaches it) it types MESSAGE, presses Send, and prints a line "streamed <monotonic time> <characters shown>" ten times a second, so that a test can
kill -9 it mid-answer and know what had streamed until then (CLOCK_MONOTONIC is the machine's, shared by both
processes). Only the test's QTimer is added to the process: the window, its engine and its store are the product's.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

import app.ui.shell.app as ui_app

PRINT_MS = 100
_asked_load: list[str] = []  # the model load asked for once


def _drive(message: str, model: str | None = None, image: str | None = None) -> None:
    from app.protocol.messages import LoadOptions
    from app.ui.shell.main_window import MainWindow

    window = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)), None)
    if window is None or not window.bridge.ready or window.bridge.loading:
        QTimer.singleShot(50, lambda: _drive(message, model, image))
        return
    if model and (window.bridge.info or {}).get("path") != model:
        if not _asked_load:
            _asked_load.append(model)
            window.load_model(LoadOptions(model_path=model, n_ctx=1024))
        QTimer.singleShot(200, lambda: _drive(message, model, image))
        return
    chat = window.chat
    if not chat.send_button.isEnabled():  # as a user waits for Send: the load's queued news can still be arriving
        QTimer.singleShot(50, lambda: _drive(message, model, image))
        return
    if image:
        chat.attach_bar.add_paths([image])
    # A long answer, whatever the model thinks: the tiny test models write some 4,000 tokens a second, so 4,000
    # tokens were over before the first line said anything had streamed.
    chat.sampling_overrides = {"ignore_eos": True, "max_tokens": 100_000}
    chat.sampling.temperature.setValue(0.0)
    chat.sampling.max_tokens.setValue(4000)
    chat.input.setPlainText(message)
    chat.send_button.click()
    print(f"sent {chat.conversation_id}", flush=True)
    report = QTimer(window)
    report.setInterval(PRINT_MS)
    report.timeout.connect(lambda: print(f"streamed {time.monotonic():.3f} {len(chat.transcript.stream_text())}",
                                         flush=True))
    report.start()


def main() -> int:
    message, model, image = (sys.argv[1:] + [None, None])[:3]
    make_app = ui_app.make_app

    def make_and_drive(argv):
        qapp = make_app(argv)
        QTimer.singleShot(0, lambda: _drive(message, model, image))
        return qapp

    ui_app.make_app = make_and_drive
    from app.cli import main as hearth

    return hearth(["gui"])


if __name__ == "__main__":
    sys.exit(main())


# --- for the tests: the driven window, killed mid-answer ---------------------------------------------------------
@dataclass
class Killed:
    conversation_id: int
    streamed: list[tuple[float, int]]  # (CLOCK_MONOTONIC, characters shown) as the driver printed them
    killed_at: float


def read_lines(proc, until, deadline_s: float) -> list[str]:
    lines = []
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if until(lines):
            return lines
    raise AssertionError(f"the window did not get there in {deadline_s:.0f} s: {lines[-5:]}")


def kill_mid_answer(message: str, *model_and_image: str, stream_s: float, start_s: float = 180) -> Killed:
    """`hearth gui` driven with this message (a model and an image, where given), kill -9'd stream_s seconds into
    its answer; its engine is ended after (as the OS would once its pipe closes)."""
    import os
    import signal
    import subprocess

    import psutil

    from tests.helpers.paths import REPO

    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.gui_driver", message, *model_and_image],
                            cwd=str(REPO), env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    children: list = []
    streamed: list[tuple[float, int]] = []
    try:
        # Order: the model loads, "sent", then "streamed" lines; the kill comes stream_s into the answer.
        lines = read_lines(proc, lambda got: got[-1].startswith("sent"), start_s)
        cid = int(lines[-1].split()[1])

        def enough(got) -> bool:
            if got[-1].startswith("streamed"):
                _, t, n = got[-1].split()
                if int(n) > 0:
                    streamed.append((float(t), int(n)))
            return bool(streamed) and streamed[-1][0] - streamed[0][0] >= stream_s

        read_lines(proc, enough, 60 + stream_s)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for child in children:
            if child.is_running():
                child.kill()
    return Killed(cid, streamed, killed_at)
