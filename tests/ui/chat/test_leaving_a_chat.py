"""Opening another chat while an answer streams (#49.13): it stopped without a word. It is said at the moment of
switching, and the answer written so far is kept in the chat left, where Continue goes on from it."""

from __future__ import annotations

from app.core.chats.store import ChatStore
from tests.ui.conftest import ask

WAIT_MS = 60_000


def test_leaving_a_chat_mid_answer_says_the_answer_stops(qtbot, main_window):
    w = main_window
    ask(qtbot, w, "Say hi.", max_tokens=4)
    other = w.chat.conversation_id
    w.chat.new_conversation()
    with qtbot.waitSignal(w.bridge.token_received, timeout=WAIT_MS):
        ask(qtbot, w, "Write a long poem about the sea, with many verses.", max_tokens=400, wait=False)
    left = w.chat.conversation_id
    title = ChatStore().get(left).title
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=WAIT_MS):
        w.chat.conversations.select(other)
        w.chat.open_conversation(other)
        # At the moment of switching, before the engine's answer ends:
        said = w.statusBar().currentMessage()
        assert said == (f"The answer in “{title}” stopped when you left that chat; what it wrote is kept, and "
                        "Continue there goes on from it.")
    kept = ChatStore().messages(left)[-1]
    assert kept.role == "assistant" and kept.content and kept.meta.get("finish_reason") == "cancelled"
