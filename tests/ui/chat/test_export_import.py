"""#31, export: File > Export chat as Markdown / JSON writes the open chat, File > Import chat… brings a JSON export
back as a new chat and opens it; a damaged file gets a sentence in the status bar and imports nothing; File >
Import model… opens the Models page's import."""

from __future__ import annotations

import json

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QFileDialog

from app.core.chats.store import ChatStore


def menu_action(window, menu_title: str, text: str):
    menu = next(a.menu() for a in window.menuBar().actions() if a.text().replace("&", "") == menu_title)
    return next(a for a in menu.actions() if a.text() == text)


def choose_file(path: str, seen: list) -> None:
    """Pick a file in the file dialog once it is open, as a user would."""
    def fill():
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QFileDialog):
            QTimer.singleShot(20, fill)
            return
        seen.append(dialog.windowTitle())
        dialog.selectFile(path)
        dialog.accept()

    QTimer.singleShot(0, fill)


def test_export_a_chat_as_markdown_and_json_and_import_it_back(qtbot, idle_window, tmp_path):
    w = idle_window
    store = ChatStore()
    cid = store.create("Cats and dogs", "Be brief.")
    store.add_message(cid, "user", "Cats or dogs?")
    store.add_message(cid, "assistant", "<think>both</think>Both are **good**: $x^2$.",
                      {"model": "SmolLM2", "model_path": "/elsewhere/smol.gguf", "thought_s": 2.0})
    w.chat.conversations.refresh()
    w.chat.open_conversation(cid)

    markdown = w.export_chat("markdown", str(tmp_path / "chat.md"))
    assert w.statusBar().currentMessage() == f"Chat exported to {markdown}"
    text = markdown.read_text(encoding="utf-8")
    assert "# Cats and dogs" in text and "## Assistant · SmolLM2" in text and "Both are **good**: $x^2$." in text
    exported = w.export_chat("json", str(tmp_path / "chat.json"))
    assert json.loads(exported.read_text(encoding="utf-8"))["messages"][1]["meta"]["thought_s"] == 2.0

    seen: list = []
    choose_file(str(exported), seen)
    menu_action(w, "File", "Import chat…").trigger()
    assert seen == ["Import a chat"]
    copy = w.chat.conversation_id
    assert copy != cid and [c.id for c in store.list()][0] == copy  # listed first, and open
    assert w.chat.conversations.current_id() == copy
    # Named apart from the chat it was exported from, which is still here.
    assert w.statusBar().currentMessage() == "Imported “Cats and dogs (imported)” from chat.json (2 messages)."
    qtbot.waitUntil(lambda: not w.chat.transcript.loading, timeout=5_000)
    shown = w.chat.transcript.plain_text()
    assert "Thought for 2.0 s" in shown and "Both are good: x2." in shown
    assert w.chat.system_prompt.toPlainText() == "Be brief."
    # Its model was on another machine: the chat says so rather than offering a load that cannot work.
    assert "no longer at /elsewhere" in w.chat.model_note.text()

    (tmp_path / "broken.json").write_text('{"messages": [{"role": "user"', encoding="utf-8")
    before = len(store.list())
    assert w.import_chat(str(tmp_path / "broken.json")) is None
    assert w.statusBar().currentMessage().startswith("broken.json cannot be imported: it is not valid JSON (line 1")
    assert len(store.list()) == before and w.chat.conversation_id == copy
    w.chat.new_conversation()
    assert w.export_chat("json", str(tmp_path / "none.json")) is None and not (tmp_path / "none.json").exists()
    assert w.statusBar().currentMessage() == "Open a chat first: there is nothing to export."
    w.chat.open_conversation(copy)
    assert w.export_chat("markdown", str(tmp_path / "no-such-folder" / "x.md")) is None
    assert w.statusBar().currentMessage().startswith(f"The chat could not be exported to {tmp_path}")


def test_file_menu_imports_a_model_on_the_models_page(qtbot, idle_window, model_variant):
    w = idle_window
    seen: list = []
    choose_file(str(model_variant("Q8_0")), seen)
    menu_action(w, "File", "Import model…").trigger()
    assert seen == ["Import a GGUF model"] and w.tabs.currentWidget() is w.models
    qtbot.waitUntil(lambda: "Imported" in w.models.status.text(), timeout=20_000)
    assert "smollm2-135m-Q8_0.gguf" in w.models.status.text()
