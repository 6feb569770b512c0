"""Documents in the real window: attach by the paperclip and by drag and drop, a chip with the size in tokens kept
on the message, regenerate with the same files, the Documents page indexing a folder in the background, and a
collection chosen per chat whose passages the answer cites (the embedding model in its own engine process)."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QFileDialog

from app.core.chats.store import ChatStore
from app.docs.store import Store
from tests.docs.conftest import docs_folder, embed_gguf  # noqa: F401  (fixtures)
from tests.ui.conftest import ask


def drop_files(widget, paths) -> None:
    """What a file manager's drag does: enter (which the chat must accept), then drop."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(QPoint(5, 5), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(widget, QDropEvent(QPointF(5, 5), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier))


def test_attach_regenerate_and_a_collection_per_chat(qtbot, main_window, tmp_path, docs_folder, embed_gguf,
                                                     monkeypatch):
    monkeypatch.setenv("HEARTH_EMBED_MODEL", str(embed_gguf))
    w = main_window
    chat = w.chat
    party = tmp_path / "party.txt"
    party.write_text("The garden party's budget is 450 euros.", encoding="utf-8")
    menu = tmp_path / "menu.md"
    menu.write_text("# Menu\nLemon cake and iced tea.", encoding="utf-8")

    # The paperclip opens a file dialog; a dropped file is attached, not pasted into the message box.
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(party)], ""))
    chat.attach_bar.button.click()
    qtbot.waitUntil(lambda: len(chat.attach_bar.pending) == 1, timeout=10_000)
    drop_files(chat.input.viewport(), [menu])
    qtbot.waitUntil(lambda: len(chat.attach_bar.pending) == 2, timeout=10_000)
    assert chat.input.toPlainText() == ""
    chips = [chat.attach_bar.chips.itemAt(i).widget().text() for i in range(chat.attach_bar.chips.count())]
    assert chips[0].startswith("party.txt · ") and " tokens" in chips[0] and chips[1].startswith("menu.md · ")

    done = ask(qtbot, w, "What is the party's budget?", max_tokens=8)
    assert chat.attach_bar.pending == []
    store = ChatStore()
    question = store.messages(chat.conversation_id)[0]
    kept = question.meta["attachments"]
    assert [(a["name"], a["mode"]) for a in kept] == [("party.txt", "whole"), ("menu.md", "whole")]
    assert kept[0]["text"] == party.read_text(encoding="utf-8") and kept[0]["tokens"] > 5
    # The attachment icon (an image: one object character in the plain text), then the name.
    assert f"\ufffc party.txt · {kept[0]['tokens']:,} tokens" in chat.transcript.plain_text()
    assert done["prompt_tokens"] > kept[0]["tokens"] + kept[1]["tokens"]

    # Regenerate sees the same files, even after the file on disk changed: the message keeps what was attached.
    party.write_text("Something else entirely, and much longer than before. " * 5, encoding="utf-8")
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000) as again:
        chat.regen_button.click()
    assert again.args[0]["prompt_tokens"] == done["prompt_tokens"]

    # The Documents page indexes a folder in the background, holding while the model answers.
    page = w.documents
    page.vectors.setChecked(True)
    with qtbot.waitSignal(page.runner.finished, timeout=120_000) as indexed:
        assert page.add_folder(str(docs_folder), "home")
    assert indexed.args[0].added == 6 and indexed.args[0].embedded > 0
    assert page.table.rowCount() == 1 and page.table.item(0, 0).text() == "home"
    assert page.status.text().startswith("Indexed: home: 6 added")

    # A collection chosen for a new chat is kept for that chat only; the answer cites its passages.
    chat.new_conversation()
    panel = chat.collections_panel
    assert [panel.list.item(i).text() for i in range(panel.list.count())] == ["home"]
    panel.list.item(0).setCheckState(Qt.Checked)
    ask(qtbot, w, "Where is the reset button of the boiler?", max_tokens=8)
    with_docs = chat.conversation_id
    assert Store().chat_collections(with_docs) == ["home"]
    answer = store.messages(with_docs)[-1]
    first = answer.meta["sources"][0]
    assert (first["n"], first["where"], first["collection"]) == (1, "manual.pdf p. 2", "home")
    assert "blue panel" in first["text"] and "[1] manual.pdf p. 2" in chat.transcript.plain_text()
    chat.show_source(answer.id, 1)
    assert str(docs_folder / "manual.pdf") in chat.source_box.text()
    chat.source_box.close()

    chat.new_conversation()
    assert panel.list.item(0).checkState() == Qt.Unchecked
    chat.open_conversation(with_docs)
    assert panel.list.item(0).checkState() == Qt.Checked


def test_without_an_embedding_model_vectors_are_not_offered_and_the_reason_is_plain(qtbot, idle_window, monkeypatch):
    """#55 E2: "Vectors (all-MiniLM-L6-v2)" was ticked by default where no vectors could be made, and indexing then
    said so with a pip command. A machine without the checkpoint package (this one has it): nothing named, made or
    bundled, and nothing to make one from."""
    from app.docs import embed_model
    from app.ui.docs.documents_page import DocumentsPage, report_text
    from app.docs.indexer import IndexReport

    monkeypatch.setattr(embed_model, "checkpoint_zip", lambda: None)
    monkeypatch.setattr(embed_model, "find", lambda explicit=None: None)
    page = DocumentsPage(idle_window.bridge)
    qtbot.addWidget(page)
    assert not page.vectors.isChecked() and not page.vectors.isEnabled()
    assert page.vectors.toolTip() == embed_model.NO_VECTORS_PLAIN
    said = report_text(IndexReport(collection="notes", vectors_note=embed_model.BM25_ONLY))
    assert embed_model.NO_VECTORS_PLAIN in said and "pip" not in said and "HEARTH_" not in said
