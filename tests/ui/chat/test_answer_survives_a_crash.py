"""#49.1: a crash of the window (kill -9, the OOM killer, a power cut) keeps the streamed answer, less at most its
last second; the next start shows it marked interrupted, with Continue."""

from __future__ import annotations

from tests.helpers.gui_driver import kill_mid_answer
from tests.ui.chat.test_nothing_lost import link_point
from tests.ui.conftest import reopened_window

STREAM_BEFORE_KILL_S = 3.0
LOSS_ALLOWED_S = 1.0


def test_kill_9_of_the_window_mid_answer_keeps_what_streamed_marked_interrupted(qtbot, hearth_home):
    from app.core.chats.answer_saving import INTERRUPTED
    from app.core.chats.store import ChatStore

    killed = kill_mid_answer("Write a very long poem about the sea.", stream_s=STREAM_BEFORE_KILL_S)
    cid, streamed, killed_at = killed.conversation_id, killed.streamed, killed.killed_at
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
    with reopened_window(qtbot) as window:
        messages = window.store.messages(cid)
        assert [m.role for m in messages] == ["user", "assistant"]
        answer = messages[1]
        assert len(answer.content) == saved and answer.meta["finish_reason"] == INTERRUPTED
        assert window.store.drafts() == []
        assert window.chat.conversation_id == cid
        qtbot.waitUntil(lambda: not window.chat.transcript.loading, timeout=5_000)
        assert "interrupted: Hearth closed before the answer ended" in window.chat.transcript.toPlainText()
        assert link_point(window.chat.transcript, f"continue:{answer.id}") is not None
