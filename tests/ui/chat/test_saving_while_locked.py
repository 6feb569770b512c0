"""#56 A1: another program holds the chat history's lock while an answer streams (a backup tool, a database
browser, a second Hearth). The window never waits for it, keeps what it showed, saves it when the lock goes, and
can always send again."""

from __future__ import annotations

import time

from tests.core.chats.test_answer_saving import HeldLock
from tests.ui.conftest import ask
from tests.helpers.heartbeat import Heartbeat

# The old window waited 5 s on the GUI thread at every draft save; a wait for the lock now lasts 50 ms at most.
WORST_GAP_MS = 1000


def saying(w) -> str:
    """What the status bar says of saving the chat ("" when nothing)."""
    notice = w.notices.board.of("chat.saving")
    return notice.text if notice is not None else ""


def test_a_lock_mid_answer_freezes_nothing_loses_nothing_and_send_comes_back(qtbot, main_window):
    w = main_window
    w.chat.sampling_overrides = {"ignore_eos": True}
    ask(qtbot, w, "Write a long poem about the sea.", max_tokens=160, wait=False)
    qtbot.waitUntil(lambda: len(w.chat.transcript.stream_text()) > 20, timeout=30_000)
    cid = w.chat.conversation_id
    beat = Heartbeat().start()
    lock = HeldLock(w.store.path)
    try:
        with qtbot.waitSignal(w.bridge.generation_finished, timeout=120_000) as finished:
            pass
        shown = finished.args[0]["text"]
        qtbot.wait(700)  # a save or two tried meanwhile, while the lock holds
        beat.stop()
        print(beat.summary())
        assert max(beat.gaps) < WORST_GAP_MS, beat.summary()
        # The answer is over for the window: Send is back, and the status bar says the answer waits to be saved.
        assert not w.chat.generating and w.chat.send_button.isEnabled()
        assert "will be saved as soon as" in saying(w)
        assert shown and shown in w.chat.transcript.toPlainText()
        # Sending now would put the question before the answer: said, and the text stays in the box.
        w.chat.input.setPlainText("And the sky?")
        w.chat.send_button.click()
        assert w.chat.input.toPlainText() == "And the sky?" and "still being saved" in saying(w)
        assert [m.role for m in w.store.messages(cid)] == ["user"]
    finally:
        lock.release()
    # The lock went: the whole answer shown is saved, as a message after its question, and no draft is left.
    qtbot.waitUntil(lambda: [m.role for m in w.store.messages(cid)] == ["user", "assistant"], timeout=10_000)
    assert w.store.messages(cid)[1].content == shown and w.store.drafts() == []
    qtbot.waitUntil(lambda: "answer was saved" in saying(w), timeout=5_000)
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000):
        w.chat.send_button.click()
    assert [m.role for m in w.store.messages(cid)] == ["user", "assistant", "user", "assistant"]


def test_a_question_sent_while_the_history_is_locked_stays_in_the_box(qtbot, main_window):
    w = main_window
    lock = HeldLock(w.store.path)
    try:
        w.chat.input.setPlainText("Hello there")
        qtbot.waitUntil(w.chat.send_button.isEnabled, timeout=30_000)
        started = time.monotonic()
        w.chat.send_button.click()
        assert time.monotonic() - started < 1.0
        assert w.chat.input.toPlainText() == "Hello there" and not w.chat.generating
        assert "was not sent" in saying(w)
    finally:
        lock.release()
    ask(qtbot, w, "Hello there", max_tokens=8)
    assert [m.role for m in w.store.messages(w.chat.conversation_id)][-2:] == ["user", "assistant"]
