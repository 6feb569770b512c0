"""#49.1: a crash of the window (kill -9, the OOM killer, a power cut) keeps the streamed answer, less at most its
last second; the next start shows it marked interrupted, with Continue."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from tests.ui.chat.test_nothing_lost import link_point
from tests.helpers.paths import REPO

STREAM_BEFORE_KILL_S = 3.0
LOSS_ALLOWED_S = 1.0


def _read_lines(proc, until, deadline_s: float) -> list[str]:
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


def test_kill_9_of_the_window_mid_answer_keeps_what_streamed_marked_interrupted(qtbot, hearth_home):
    from app.core.chats.answer_saving import INTERRUPTED
    from app.core.chats.store import ChatStore

    repo = str(REPO)
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.gui_driver", "Write a very long poem about the sea."],
                            cwd=repo, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    children: list[psutil.Process] = []
    try:
        # Order: the model loads, "sent", then "streamed" lines; the kill comes STREAM_BEFORE_KILL_S into the answer.
        lines = _read_lines(proc, lambda got: got[-1].startswith("sent"), 120)
        cid = int(lines[-1].split()[1])
        started = None
        streamed: list[tuple[float, int]] = []

        def enough(got):
            nonlocal started
            if got[-1].startswith("streamed"):
                _, t, n = got[-1].split()
                if int(n) > 0:
                    started = started or float(t)
                    streamed.append((float(t), int(n)))
            return started is not None and streamed[-1][0] - started >= STREAM_BEFORE_KILL_S

        _read_lines(proc, enough, 60)
        children = psutil.Process(proc.pid).children(recursive=True)  # the engine: ended by the test below
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
    # What had streamed one second before the kill must be in the store; the kill came after the last line read.
    due = max((n for t, n in streamed if t <= killed_at - LOSS_ALLOWED_S), default=0)
    shown_last = streamed[-1][1]
    store = ChatStore()
    try:
        [draft] = store.drafts()  # its owner died: nothing saved it as a message yet
        saved = len(draft["content"])
        print(f"streamed {shown_last} characters by the kill; saved {saved}; due (1 s before) {due}; {streamed[::5]}")
        assert draft["conversation_id"] == cid and saved >= due > 0
        assert draft["meta"].get("finish_reason") == INTERRUPTED
    finally:
        store.close()

    # The next start: the answer is a message under the question, marked interrupted, with Continue.
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    make_app([])
    window = MainWindow(load_on_start=False)
    qtbot.addWidget(window)
    window.show()
    try:
        messages = window.store.messages(cid)
        assert [m.role for m in messages] == ["user", "assistant"]
        answer = messages[1]
        assert len(answer.content) == saved and answer.meta["finish_reason"] == INTERRUPTED
        assert window.store.drafts() == []
        assert window.chat.conversation_id == cid
        qtbot.waitUntil(lambda: not window.chat.transcript.loading, timeout=5_000)
        assert "interrupted: Hearth closed before the answer ended" in window.chat.transcript.toPlainText()
        assert link_point(window.chat.transcript, f"continue:{answer.id}") is not None
    finally:
        window.close()
