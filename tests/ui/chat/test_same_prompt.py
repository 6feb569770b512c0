"""#44: a chat's prompt is built by one headless function (app/core/chats/prompt.py): the window and `hearth chat`
send the same messages for the same chat (system text, history with an answer's thinking left out, a document
attached whole to the first question)."""

from __future__ import annotations

import argparse
import builtins

from app.protocol.messages import Done, SamplingOptions, Token

NOTES = "Buy oat milk.\nCall the plumber on Tuesday."
ANSWER = "<think>The user greets me.</think>Hi! How can I help?"


class RecordingClient:
    """hearth chat's client, answering each question with ANSWER and keeping what it was sent."""

    def __init__(self):
        self.sent: list[list[dict]] = []

    def chat(self, messages, sampling):
        self.sent.append(messages)
        yield Token({"ev": "token", "text": ANSWER})
        yield Done({"ev": "done", "text": ANSWER, "completion_tokens": 9, "gen_tok_s": 50.0})

    def reset(self):
        pass


def terminal_prompt(notes_path, bundled_model, monkeypatch) -> list[dict]:
    """`hearth chat --system "Be brief." --attach notes.txt`, two questions typed; the second one's messages."""
    from app.commands.chat import interactive
    from app.commands.chat_docs import open_docs

    args = argparse.Namespace(attach=[str(notes_path)], docs=[], docs_budget=None, embed_model=None, system="Be brief.")
    info = {"name": "bundled", "n_ctx": 4096}
    docs = open_docs(args, info, str(bundled_model), "")
    typed = iter(["Hello", "What do my notes say?"])

    def type_line(_prompt=""):
        try:
            return next(typed)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr(builtins, "input", type_line)
    client = RecordingClient()
    try:
        assert interactive(client, info, "Be brief.", SamplingOptions(), docs) == 0
    finally:
        docs.close()
    return client.sent[-1]


def test_the_window_and_hearth_chat_send_the_same_prompt_for_the_same_chat(qtbot, main_window, tmp_path,
                                                                         bundled_model, monkeypatch):
    from app.docs.conversation import KEY, attachment_meta
    from app.docs.attach import read_attachment

    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES, encoding="utf-8")
    expected = terminal_prompt(notes, bundled_model, monkeypatch)
    assert expected[0] == {"role": "system", "content": "Be brief."}

    # The same chat in the window: the file attached to the first question, the same answer kept.
    w = main_window
    attached = read_attachment(str(notes), w.chat.docs.count(str(bundled_model)))
    attached.mode = "whole"
    cid = w.store.create("Notes", "Be brief.")
    w.store.add_message(cid, "user", "Hello", {KEY: [attachment_meta(attached)]})
    w.store.add_message(cid, "assistant", ANSWER)
    w.chat.conversations.refresh(select=cid)
    w.chat.open_conversation(cid)
    sent: list[list[dict]] = []
    chat = w.bridge.chat
    monkeypatch.setattr(w.bridge, "chat", lambda messages, sampling: sent.append(messages) or chat(messages, sampling))
    w.chat.sampling.max_tokens.setValue(4)
    w.chat.input.setPlainText("What do my notes say?")
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000):
        w.chat.send_button.click()
    assert sent == [expected]
    assert expected[1]["content"] == f'<document name="notes.txt">\n{NOTES}\n</document>\n\nHello'
    assert expected[2] == {"role": "assistant", "content": "Hi! How can I help?"}  # its thinking is left out
    assert expected[3] == {"role": "user", "content": "What do my notes say?"}
