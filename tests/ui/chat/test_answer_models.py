"""#31, which model: each answer names the model that wrote it (and the server, for a remote one); a chat remembers
its model and offers to load it when another one answers; a cut-off answer continues from where it stopped."""

from __future__ import annotations

from PySide6.QtCore import Qt, QUrl

from app.core.library.bundled import BUNDLED_NAME
from app.core.chats.store import ChatStore
from tests.ui.conftest import ask

LOAD_TIMEOUT_MS = 60_000


def test_an_answer_names_its_model_and_a_cut_off_answer_continues_where_it_stopped(qtbot, main_window,
                                                                                    bundled_model):
    w = main_window
    done = ask(qtbot, w, "Tell me a long story about a cat.", max_tokens=6)
    assert done["finish_reason"] == "length"
    store = ChatStore()
    [first] = [m for m in store.messages(w.chat.conversation_id) if m.role == "assistant"]
    assert first.meta["model"] == BUNDLED_NAME and first.meta["model_path"] == str(bundled_model)
    header = w.chat.transcript.plain_text().split("Assistant", 1)[1].split("\n", 1)[0]
    assert BUNDLED_NAME in header and "hit the length limit" in header and "Continue" in header
    assert not w.chat.model_banner.isVisibleTo(w)  # the chat's model is the one loaded

    sent: list[list[dict]] = []
    chat = w.bridge.chat
    w.bridge.chat = lambda messages, *args, **kw: sent.append(messages) or chat(messages, *args, **kw)
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=LOAD_TIMEOUT_MS) as more:
        w.chat.transcript._on_anchor(QUrl(f"continue:{first.id}"))  # the link in the answer's header
    # Asked with the answer so far as the start of the reply; what came joins the same answer.
    assert sent[0][-1] == {"role": "assistant", "content": first.content}
    [answer] = [m for m in store.messages(w.chat.conversation_id) if m.role == "assistant"]
    assert answer.id == first.id and answer.content == first.content + more.args[0]["text"]
    assert len(answer.content) > len(first.content)
    assert answer.meta["completion_tokens"] == 6 + more.args[0]["completion_tokens"]
    shown = w.chat.transcript.plain_text()
    assert shown.count("Assistant") == 1 and shown.count(first.content.strip()[:20]) == 1
    # Ctrl+R regenerates it: a second version, the first kept.
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=LOAD_TIMEOUT_MS):
        qtbot.keyClick(w.chat.input, Qt.Key_R, Qt.ControlModifier)
    assert store.message(first.id).versions == 2 and "2/2" in w.chat.transcript.plain_text()
    # Reopened, the one answer reads as it was shown.
    cid = w.chat.conversation_id
    w.chat.new_conversation()
    w.chat.open_conversation(cid)
    qtbot.waitUntil(lambda: not w.chat.transcript.loading, timeout=5_000)
    reopened = w.chat.transcript.plain_text()
    assert reopened.count("Assistant") == 1 and f"{BUNDLED_NAME} · " in reopened


def test_a_chat_remembers_its_model_and_offers_to_load_it_or_says_why_not(qtbot, idle_window, bundled_model,
                                                                            tmp_path):
    w = idle_window
    store = ChatStore()

    def chat_with(meta: dict) -> int:
        cid = store.create("A chat")
        store.add_message(cid, "user", "Hi")
        store.add_message(cid, "assistant", "Hello!", {"finish_reason": "stop", **meta})
        return cid

    here = chat_with({"model": BUNDLED_NAME, "model_path": str(bundled_model)})
    gone = chat_with({"model": "old-model.gguf", "model_path": str(tmp_path / "moved" / "old-model.gguf")})
    remote = chat_with({"model": "llama3", "endpoint": "http://gpu-box:8080/v1"})
    w.chat.conversations.refresh()

    w.chat.open_conversation(gone)
    note = w.chat.model_note.text()
    assert w.chat.model_banner.isVisibleTo(w) and not w.chat.model_load_button.isVisibleTo(w)
    assert note.startswith("This chat was with old-model.gguf, no longer at ") and "moved" in note
    assert "Import model" in w.chat.model_note.toolTip()
    assert "no model is loaded" in note
    w.chat.open_conversation(remote)
    assert "llama3 on http://gpu-box:8080/v1" in w.chat.model_note.text() and "Connections" in w.chat.model_note.text()
    qtbot.waitUntil(lambda: not w.chat.transcript.loading, timeout=5_000)
    assert "Assistant llama3 on http://gpu-box:8080/v1" in w.chat.transcript.plain_text()  # its answer's header
    w.chat.open_conversation(here)
    assert w.chat.model_note.text() == f"This chat was with {BUNDLED_NAME}; no model is loaded."
    assert w.chat.model_load_button.isVisibleTo(w)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS):
        w.chat.model_load_button.click()
    assert w.bridge.info["path"] == str(bundled_model)
    assert not w.chat.model_banner.isVisibleTo(w)  # its model answers now
    w.chat.open_conversation(gone)
    assert f"; {BUNDLED_NAME} answers now." in w.chat.model_note.text()
