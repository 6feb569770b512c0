"""#29 in the window: an embedding model loaded in the window is said to be one at once, not after a message is
sent: the chat shows the engine's sentence and Send is off with it as its hint; a chat model loaded after it
chats again."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.helpers.tiny_gguf import write_tiny_bert
from tests.ui.conftest import ask, shot
from tests.ui.bridge.test_load_states import select_in_library

LOAD_TIMEOUT_MS = 60_000


def test_an_embedding_model_says_at_once_that_it_cannot_chat_and_send_is_off(qtbot, main_window, tmp_path,
                                                                             bundled_model):
    w = main_window
    bert = write_tiny_bert(tmp_path / "tiny-bert-embeddings.gguf")
    select_in_library(qtbot, w, bert)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS) as loaded:
        w.models.load_button.click()
    refusal = loaded.args[0]["cannot_generate"]
    assert refusal and "embedding model" in refusal and "cannot write an answer" in refusal
    chat = w.chat
    w.tabs.setCurrentWidget(chat)
    assert chat.hint.text() == refusal and chat.hint.isVisibleTo(w)  # before anything is sent
    assert not chat.send_button.isEnabled() and chat.send_button.toolTip() == refusal
    assert not chat.regen_button.isEnabled()
    chat.input.setPlainText("Hello?")
    qtbot.keyClick(chat.input, Qt.Key_Return)  # Enter sends nothing either
    assert chat.input.toPlainText() == "Hello?" and not chat.generating
    qtbot.wait(50)  # the page's relayout for the hint
    shot(w, "cannot-chat", tmp_path)

    # A chat model again: Send is back, the hint gone, and it answers.
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS):
        chat.picker.combo.setCurrentIndex(chat.picker.combo.findData(str(bundled_model)))
        chat.picker.load_button.click()
    assert chat.send_button.isEnabled() and chat.hint.text() != refusal
    done = ask(qtbot, w, "Hello?", max_tokens=2)
    assert done["completion_tokens"] >= 1
