"""#31, prompts: system-prompt presets beside the sampling presets; pick one for a chat, edit it (pick, change the
text, Save… under its name), save a new one, delete one; a chat keeps its prompt whatever happens to presets."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QInputDialog

from app.core.chats.store import ChatStore
from app.ui.chat.preset_store import STARTERS, load_presets


def answer_name_dialog(name: str, offered: list) -> None:
    """Type a name into the Save… dialog once it is open, as a user would, and say what it offered."""
    def fill():
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QInputDialog):
            QTimer.singleShot(20, fill)
            return
        offered.append(dialog.textValue())
        dialog.setTextValue(name)
        dialog.accept()

    QTimer.singleShot(0, fill)


def test_pick_edit_save_and_delete_system_prompt_presets(qtbot, idle_window):
    w = idle_window
    presets, box = w.chat.prompt_presets, w.chat.system_prompt
    store = ChatStore()
    first = store.create("First chat")
    w.chat.conversations.refresh()
    w.chat.open_conversation(first)
    names = [presets.combo.itemText(i) for i in range(presets.combo.count())]
    assert names == ["None", *(p["name"] for p in STARTERS)] and presets.combo.currentText() == "None"

    presets.pick("Concise")
    assert box.toPlainText() == STARTERS[0]["text"] and store.get(first).system_prompt == STARTERS[0]["text"]
    # Edited in the box, the prompt is no preset's any more; Save… offers the picked one's name, to edit it.
    box.setPlainText("Answer in one sentence.")
    assert presets.combo.currentText() == "Custom" and not presets.delete_button.isEnabled()
    offered: list = []
    answer_name_dialog("Concise", offered)
    presets.save_button.click()
    assert offered == ["Concise"]
    assert presets.combo.currentText() == "Concise" and w.statusBar().currentMessage() == "Preset “Concise” updated."
    assert load_presets()[0] == {"name": "Concise", "text": "Answer in one sentence."}

    # Another chat saves a new one; the first keeps its own text.
    second = store.create("Second chat")
    w.chat.conversations.refresh()
    w.chat.open_conversation(second)
    assert box.toPlainText() == "" and presets.combo.currentText() == "None"
    box.setPlainText("Talk like a pirate.")
    assert presets.save("Pirate")
    assert presets.combo.currentText() == "Pirate" and w.statusBar().currentMessage() == "Preset “Pirate” saved."
    assert store.get(second).system_prompt == "Talk like a pirate."
    assert presets.delete(confirm=False)
    assert "Pirate" not in [presets.combo.itemText(i) for i in range(presets.combo.count())]
    assert presets.combo.currentText() == "Custom" and box.toPlainText() == "Talk like a pirate."
    presets.pick("None")
    assert box.toPlainText() == "" and store.get(second).system_prompt == ""
    assert not presets.save("Empty")
    assert w.statusBar().currentMessage().startswith("The system prompt is empty")
    w.chat.open_conversation(first)
    assert presets.combo.currentText() == "Concise" and box.toPlainText() == "Answer in one sentence."
