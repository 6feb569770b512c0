"""Chatting in the real window: streaming, stop, conversations, crash recovery, a second model."""

from __future__ import annotations

import os
import signal

from PySide6.QtCore import Qt

from app.core.chats.store import ChatStore
from tests.ui.conftest import ask


def test_send_streams_the_answer_into_the_transcript_and_the_store(qtbot, main_window):
    w = main_window
    tokens: list[str] = []
    w.bridge.token_received.connect(tokens.append)
    order: list[str] = []
    w.chat.generation_started.connect(lambda: order.append("started"))
    w.bridge.stats_received.connect(lambda _s: order.append("stats") if "stats" not in order else None)
    w.bridge.generation_finished.connect(lambda _d: order.append("finished"))
    w.chat.sampling_overrides = {"ignore_eos": True}  # long enough to stream: ~0.5 s at full speed
    done = ask(qtbot, w, "Name three colors.", max_tokens=48)
    assert order[0] == "started" and order[-1] == "finished"
    # Pieces merged for the window (about 12 a second, app.ui.bridge.bridge_signals.STREAM_INTERVAL_MS), not at once.
    assert len(tokens) >= 4, "the answer arrived in pieces, not at once"
    assert "".join(tokens) == done["text"]
    # Rendered as Markdown once finished, so compare words, not markup.
    shown = w.chat.transcript.plain_text()
    words = [x.strip(".,:;*#`") for x in done["text"].split()]
    assert all(word in shown for word in words if word and not word.isdigit()), shown  # list numbers are markup
    assert "Name three colors." in w.chat.transcript.plain_text()
    # The conversation is in SQLite, titled after the question.
    store = ChatStore()
    [conv] = store.list()
    assert conv.title == "Name three colors."
    assert [m.role for m in store.messages(conv.id)] == ["user", "assistant"]
    assert store.messages(conv.id)[1].content == done["text"]
    assert w.chat.send_button.isEnabled() and not w.chat.stop_button.isEnabled()


def test_stop_mid_answer_keeps_what_was_generated(qtbot, main_window):
    w = main_window
    ask(qtbot, w, "Write a long story about a lighthouse keeper.", max_tokens=2000, wait=False)
    qtbot.waitUntil(lambda: len(w.chat.transcript.stream_text()) > 20, timeout=30_000)
    assert w.chat.stop_button.isEnabled()
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=10_000) as finished:
        qtbot.keyClick(w.chat.input, Qt.Key_Escape)
    done = finished.args[0]
    assert done["finish_reason"] == "cancelled"
    assert done["completion_tokens"] < 2000
    msgs = ChatStore().messages(w.chat.conversation_id)
    assert msgs[-1].role == "assistant" and msgs[-1].content == done["text"] and msgs[-1].content
    assert "stopped" in w.chat.transcript.plain_text()


def test_switch_conversations_shows_each_transcript(qtbot, main_window):
    w = main_window
    ask(qtbot, w, "First topic: apples.", max_tokens=8)
    first = w.chat.conversation_id
    qtbot.keyClick(w.chat.input, Qt.Key_N, Qt.ControlModifier)
    # A new chat shows nothing of the last one: only the welcome of an empty chat (#55 A).
    assert w.chat.conversation_id is None and w.chat.transcript.welcoming
    assert "apples" not in w.chat.transcript.plain_text()
    ask(qtbot, w, "Second topic: boats.", max_tokens=8)
    second = w.chat.conversation_id
    assert second != first and w.chat.conversations.list.count() == 2
    w.chat.conversations.select(first)
    w.chat.open_conversation(first)
    qtbot.waitUntil(lambda: not w.chat.transcript.loading, timeout=5_000)  # it fills in from the next turn on
    assert "apples" in w.chat.transcript.plain_text() and "boats" not in w.chat.transcript.plain_text()
    # Search narrows the list to matching conversations.
    w.chat.conversations.search.setText("boats")
    assert w.chat.conversations.list.count() == 1
    w.chat.conversations.search.setText("")
    # Rename and delete through the list.
    w.chat.conversations.select(second)
    w.chat.conversations.rename_current("Boats")
    assert [c.title for c in ChatStore().list() if c.id == second] == ["Boats"]
    w.chat.conversations.delete_current(confirm=False)
    assert [c.id for c in ChatStore().list()] == [first]


def test_killed_engine_keeps_the_partial_answer_and_restarts(qtbot, main_window):
    w = main_window
    ask(qtbot, w, "Tell me everything about the history of bread.", max_tokens=2000, wait=False)
    qtbot.waitUntil(lambda: len(w.chat.transcript.stream_text()) > 20, timeout=30_000)
    qtbot.waitUntil(lambda: w.monitor.summary.text().startswith("Generating… "), timeout=30_000)  # with its speed
    old_pid = w.bridge.pid
    crashes: list[str] = []
    w.bridge.engine_crashed.connect(crashes.append)
    with qtbot.waitSignals([w.bridge.engine_crashed, w.bridge.model_loaded], order="strict", timeout=90_000):
        os.kill(old_pid, signal.SIGKILL)
    [message] = crashes
    assert "SIGKILL" in message and "restarts" in message
    assert w.bridge.pid != old_pid and w.bridge.ready
    # Nothing says it is still generating (#31.8: the monitor stayed at "Generating… 12.9 tok/s").
    assert w.monitor.summary.text() == "The last answer did not finish"
    assert w.state_label.text() == "Ready" and w.speed_label.text() == ""
    text = w.chat.transcript.plain_text()
    assert "Error" in text and "SIGKILL" in text
    msgs = ChatStore().messages(w.chat.conversation_id)
    assert msgs[-1].role == "assistant" and len(msgs[-1].content) > 20 and "SIGKILL" in msgs[-1].meta["error"]
    # And the chat goes on with the restarted engine.
    done = ask(qtbot, w, "Short answer please.", max_tokens=6)
    assert done["completion_tokens"] > 0


def test_load_a_second_model(qtbot, main_window, model_variant):
    w = main_window
    path = str(model_variant("Q8_0"))
    w.tabs.setCurrentWidget(w.models)
    w.models.import_file(path)
    qtbot.waitUntil(lambda: path in [m["path"] for m in w.models.models], timeout=10_000)
    w.models.table.selectRow([m["path"] for m in w.models.models].index(path))
    loaded: list[dict] = []
    w.bridge.model_loaded.connect(loaded.append)
    with qtbot.waitSignals([w.bridge.model_loading, w.bridge.model_loaded], order="strict", timeout=60_000):
        w.models.load_button.click()
    [info] = loaded
    assert info["path"] == path
    assert "Q8_0" in w.models.status.text() or "Loaded" in w.models.status.text()
    w.tabs.setCurrentWidget(w.chat)
    done = ask(qtbot, w, "Hello!", max_tokens=6)
    assert done["completion_tokens"] > 0


def test_a_chat_longer_than_the_context_says_so_under_the_answer(qtbot, main_window, bundled_model):
    """#18 item 13: the window policy keeps the start and the end of a long chat; the user is told."""
    from app.protocol.messages import LoadOptions

    w = main_window
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=60_000):
        w.load_model(LoadOptions(model_path=str(bundled_model), n_ctx=256))
    done = ask(qtbot, w, "word " * 1200, max_tokens=2)
    assert done["prompt_dropped"] > 900
    assert f"{done['prompt_dropped']:,} earlier tokens were not seen" in w.chat.transcript.plain_text()
