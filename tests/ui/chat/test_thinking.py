"""A reasoning model's <think>…</think> in the window: a "Thinking" block, grey while it streams, closed with
its time once the answer ends, opened and closed by its link; left out of the next turn's prompt while the
store keeps the whole answer. A grammar makes the bundled SmolLM2 write the tags every time."""

from __future__ import annotations

from PySide6.QtCore import QUrl

from app.core.chats.store import ChatStore
from tests.ui.conftest import ask

THINKS = 'root ::= "<think>" [a-z] [a-z ]{2,20} "</think>" [a-z] [a-z ]{2,20}'


def test_a_streamed_thinking_is_grey_then_a_closed_block_with_its_time(qtbot):
    from app.ui.shell.app import make_app
    from app.ui.chat.transcript import Transcript

    make_app([])
    t = Transcript()
    qtbot.addWidget(t)
    t.begin_stream()
    for piece in ["<th", "ink>", "let me", " see</th", "ink>\n\nThe sky", " is blue."]:
        t.append_token(piece)
        t.flush()
        if piece == "ink>":
            assert "Thinking…" in t.plain_text()
        if piece == "let me":
            assert "let me" in t.plain_text() and "<th" not in t.plain_text()
    shown = t.plain_text()
    assert "Thought for" in shown and "let me" not in shown and "The sky is blue." in shown
    text = t.end_stream("3 tokens")
    assert text.startswith("<think>")  # the whole answer, for the store
    shown = t.plain_text()
    assert "Thought for" in shown and "let me see" not in shown and "The sky is blue." in shown
    assert "<think>" not in shown and "</think>" not in shown
    t.toggle_thought(0)
    assert "▾ Thought" in t.plain_text() and "let me see" in t.plain_text()
    t.toggle_thought(0)
    assert "let me see" not in t.plain_text() and "The sky is blue." in t.plain_text()


def test_thinking_in_the_real_window_is_collapsed_timed_and_left_out_of_the_next_prompt(qtbot, main_window):
    w = main_window
    w.chat.sampling_overrides = {"grammar": THINKS}
    done = ask(qtbot, w, "What colour is the sky?", max_tokens=60)
    assert done["text"].startswith("<think>") and "</think>" in done["text"]
    thought, answer = done["text"][len("<think>"):].split("</think>")
    transcript = w.chat.transcript
    shown = transcript.plain_text()
    assert "▸ Thought for" in shown and " s" in shown
    assert "<think>" not in shown and thought.strip() not in shown
    assert answer.strip() in shown
    # Its link opens it in place, and closes it again.
    transcript._on_anchor(QUrl("thought:0"))
    assert thought.strip() in transcript.plain_text()
    transcript._on_anchor(QUrl("thought:0"))
    assert thought.strip() not in transcript.plain_text()
    # The store keeps the whole answer, and how long it thought.
    store = ChatStore()
    saved = store.messages(w.chat.conversation_id)[-1]
    assert saved.content == done["text"] and saved.meta.get("thought_s") is not None
    # Copy takes the answer as shown, without its thinking.
    from PySide6.QtGui import QGuiApplication

    w.chat._on_message_action("copy", saved.id)
    assert QGuiApplication.clipboard().text() == answer.strip()
    # The next turn's prompt has the earlier answer without its thinking.
    sent: list[list[dict]] = []
    chat = w.bridge.chat

    def recording(messages, sampling, *args, **kwargs):
        sent.append(messages)
        return chat(messages, sampling, *args, **kwargs)

    w.bridge.chat = recording
    w.chat.sampling_overrides = {}
    ask(qtbot, w, "And at night?", max_tokens=4)
    [earlier] = [m for m in sent[0] if m["role"] == "assistant"]
    assert earlier["content"] == answer.strip() and "think" not in earlier["content"]
    # Reopened, the block is closed and still says how long it took.
    w.chat.open_conversation(w.chat.conversation_id)
    qtbot.waitUntil(lambda: not w.chat.transcript.loading, timeout=5_000)
    reopened = w.chat.transcript.plain_text()
    assert f"Thought for {saved.meta['thought_s']:.1f} s" in reopened and "<think>" not in reopened


def test_an_answer_that_starts_inside_a_thinking_the_prompt_opened(qtbot):
    from app.ui.shell.app import make_app
    from app.ui.chat.transcript import Transcript

    make_app([])
    t = Transcript()
    qtbot.addWidget(t)
    t.begin_stream(opened=True)  # as chat_view does for a model whose info says opens_thinking
    t.append_token("hmm, the sky")
    t.flush()
    assert "Thinking…" in t.plain_text() and "hmm, the sky" in t.plain_text()
    t.append_token("</think>\n\nBlue.")
    t.flush()
    assert "Thought for" in t.plain_text() and "hmm" not in t.plain_text() and "Blue." in t.plain_text()
    t.end_stream()
    shown = t.plain_text()
    assert "Thought for" in shown and "</think>" not in shown and "hmm" not in shown and "Blue." in shown
