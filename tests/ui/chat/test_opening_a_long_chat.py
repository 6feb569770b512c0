"""#55 F: opening a 500-message chat painted in 0.2-0.3 s, then the view raced through the messages for 1-2 s
before it settled: the conversation fills in oldest first, and the view followed the end as it grew. Now its last
messages are what the user sees from the first look to the last, while the rest fills in unseen."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QTimer

from app.core.chats.store import ChatStore
from tests.ui.conftest import opened_window

MESSAGES = 500


def _shown_at_bottom(transcript) -> str:
    """The paragraph a user sees at the bottom of the chat: the opening view's while it is laid over the
    transcript, else the transcript's own."""
    view = transcript.opening_view if transcript.opening_view is not None else transcript
    if not view.isVisible():
        view = transcript
    return view.cursorForPosition(QPoint(40, view.viewport().height() - 30)).block().text()


def test_a_long_chat_opens_at_its_end_and_stays_there(qtbot, hearth_home):
    store = ChatStore()
    big = store.create("Five hundred messages")
    for i in range(MESSAGES):
        store.add_message(big, "user" if i % 2 == 0 else "assistant",
                          f"Message {i}: " + " ".join(f"word{(i * 7 + k) % 97}" for k in range(40)))
    store.close()
    with opened_window(qtbot, load=False) as w:
        transcript = w.chat.transcript
        seen: list[str] = []
        look = QTimer()
        look.timeout.connect(lambda: seen.append(_shown_at_bottom(transcript)))
        w.chat.conversations.select(big)
        w.chat.open_conversation(big)
        look.start(5)
        qtbot.waitUntil(lambda: not transcript.loading, timeout=60_000)
        qtbot.wait(100)  # and after it settled
        look.stop()
        bar = transcript.verticalScrollBar()
        assert bar.value() == bar.maximum() > 0
        assert f"Message {MESSAGES - 1}:" in transcript.plain_text() and "Message 0:" in transcript.plain_text()
        assert transcript.opening_view is None and transcript.viewport().updatesEnabled()
    assert len(seen) >= 5, seen
    wrong = [text[:12] for text in seen if not text.startswith(f"Message {MESSAGES - 1}:")]
    assert not wrong, f"{len(wrong)} of {len(seen)} looks showed another message: {wrong[:10]}"
