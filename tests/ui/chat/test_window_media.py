"""Images and sounds in the window (#53.3), as a user attaches them: Attach (a drop takes the same path), a paste from
the clipboard, thumbnails in the message box and the transcript, a click that opens the image larger; kept once per
content hash in the chat store, exported and imported with the chat, kept through a kill -9 mid-answer; and a model
without a projector said at once, before anything is sent."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QMimeData, QUrl
from PySide6.QtGui import QImage

from app.protocol.messages import LoadOptions
from tests.commands.test_chat_media import in_process_answer, pictures  # noqa: F401 (pictures: a fixture)
from tests.engine.media.test_media_greedy import QUESTION
from tests.helpers.gui_driver import kill_mid_answer
from tests.ui.chat.test_answer_survives_a_crash import STREAM_BEFORE_KILL_S
from tests.ui.conftest import ask, reopened_window

pytestmark = pytest.mark.slow


def chips(chat) -> list[str]:
    bar = chat.attach_bar.chips
    return [bar.itemAt(i).widget().text() for i in range(bar.count()) if bar.itemAt(i).widget()]


def test_a_model_without_a_projector_is_said_at_once_and_nothing_is_sent(qtbot, main_window, pictures):
    chat = main_window.chat
    with qtbot.waitSignal(chat.noticed, timeout=5_000) as said:
        chat.attach_bar.add_paths([str(pictures[1])])  # as a drop or Attach… hands it over
    notice = said.args[0]
    assert "cannot see images" in notice.text and "mmproj-*.gguf" in notice.text and "Hugging Face" in notice.text
    assert "--mmproj" not in notice.text  # plain words in the window, no command-line flag
    assert chips(chat) == ["picture-1.png  ✕"]
    chat.input.setPlainText("What is in this picture?")
    with qtbot.waitSignal(chat.noticed, timeout=5_000) as refused:
        chat.send_button.click()
    assert "not sent" in refused.args[0].text
    assert chat.input.toPlainText() == "What is in this picture?" and len(chat.attach_bar.media) == 1
    assert chat.conversation_id is None and main_window.store.media_count() == 0
    # A file that only looks like one by its name is one sentence, and nothing is attached.
    fake = pictures[1].with_name("notes.png")
    fake.write_text("a shopping list\n" * 20)
    with qtbot.waitSignal(chat.noticed, timeout=5_000):
        chat.attach_bar.add_paths([str(fake)])
    assert len(chat.attach_bar.media) == 1


def test_an_image_goes_with_the_question_as_the_cli_sends_it_kept_once_shown_and_opened(qtbot, main_window,
                                                                                       tiny_media, pictures, tmp_path):
    w, made = main_window, tiny_media["gemma3"]
    chat = w.chat
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=120_000):
        w.load_model(LoadOptions(model_path=str(made.model), n_ctx=1024))
    qtbot.waitUntil(lambda: (w.bridge.info or {}).get("media", {}).get("vision"), timeout=30_000)
    chat.system_prompt.setPlainText("")  # as `hearth chat --prompt` asks: the question alone
    chat.attach_bar.add_paths([str(pictures[1])])
    assert chips(chat) == ["picture-1.png  ✕"] and not chat.attach_bar.chips.itemAt(0).widget().icon().isNull()
    done = ask(qtbot, w, QUESTION, max_tokens=12)
    # The same answer, token for token, as the engine gives the CLI's message (the image, then the text).
    assert done["text"] == in_process_answer(made, 1)
    assert done["media"] == 1 and done["media_encoded"] == 1 and chips(chat) == []
    store = w.store
    [question] = [m for m in store.messages(chat.conversation_id) if m.role == "user"]
    [ref] = question.meta["media"]
    assert ref["kind"] == "image" and ref["name"] == "picture-1.png" and "base64" not in json.dumps(question.meta)
    assert store.media_data(ref["digest"]) == pictures[1].read_bytes()
    # The transcript shows it; a click opens it larger.
    assert f"hearth-media:{ref['digest']}" in chat.transcript.toHtml()
    chat.transcript._on_anchor(QUrl(f"media:{ref['digest']}"))
    qtbot.waitUntil(lambda: getattr(chat, "opened_media", None) is not None and chat.opened_media.isVisible())
    chat.opened_media.close()

    # The same image pasted into the next question is kept once; the answer sees it again (no second encode).
    mime = QMimeData()
    mime.setImageData(QImage.fromData(pictures[1].read_bytes()))
    chat.input.insertFromMimeData(mime)
    assert chips(chat) == ["pasted image.png  ✕"] and chat.input.toPlainText() == ""
    again = ask(qtbot, w, "And now?", max_tokens=4)
    assert again["media"] == 2
    assert store.media_count() == 2  # the pasted PNG is other bytes than the file (Qt wrote it again)

    # Exported and imported with the chat: the images come back, and the copy answers the same.
    from app.ui.chat.chat_export import import_chat, write_export

    exported = write_export(store, chat.conversation_id, tmp_path / "chat.json", "json")
    assert len(json.loads(exported.read_text())["media"]) == 2
    assert "Attached an image: picture-1.png" in write_export(store, chat.conversation_id, tmp_path / "chat.md",
                                                              "markdown").read_text()
    store.delete(chat.conversation_id)
    assert store.media_count() == 0
    copy = import_chat(store, exported)
    assert store.media_count() == 2
    [first, *_] = [m for m in store.messages(copy) if m.role == "user"]
    assert store.media_data(first.meta["media"][0]["digest"]) == pictures[1].read_bytes()


def test_a_kill_9_mid_answer_about_an_image_keeps_the_image_and_the_answer(qtbot, hearth_home, tiny_media, pictures):
    made = tiny_media["gemma3"]
    killed = kill_mid_answer("Describe this picture at length.", str(made.model), str(pictures[3]),
                             stream_s=STREAM_BEFORE_KILL_S)
    with reopened_window(qtbot) as window:
        messages = window.store.messages(killed.conversation_id)
        assert [m.role for m in messages] == ["user", "assistant"] and messages[1].content.strip()
        [ref] = messages[0].meta["media"]
        assert window.store.media_data(ref["digest"]) == pictures[3].read_bytes()
        window.chat.open_conversation(killed.conversation_id)
        qtbot.waitUntil(lambda: not window.chat.transcript.loading, timeout=10_000)
        assert f"hearth-media:{ref['digest']}" in window.chat.transcript.toHtml()
