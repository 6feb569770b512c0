"""System-prompt presets beside the sampling presets: pick one (it fills the chat's system prompt), save the
system prompt as a preset, or edit one (pick it, change the text, Save… keeps its name). The store is
app/ui/chat/preset_store.py."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QInputDialog, QMessageBox, QWidget

from app.ui.widgets.notices import ERROR, INFO, Notice
from app.core.errors import HearthError
from app.ui.chat.preset_store import delete_preset, find_preset, load_presets, save_preset
from app.ui.widgets import button, hbox, vbox

NONE = "None"
CUSTOM = "Custom"


class PromptPresets(QWidget):
    chosen = Signal(str)  # the system prompt of the preset picked ("" for None)
    noticed = Signal(object)  # a Notice (app.ui.widgets.notices) for the window's status bar

    def __init__(self, parent=None):
        super().__init__(parent)
        self.combo = QComboBox()
        self.combo.setAccessibleName("System prompt preset")
        self.combo.setToolTip("A saved system prompt for this chat; pick one, or write your own above and Save… it")
        self.save_button = button("Save…", lambda: self.save(),  # not clicked(False) as the name
                                  "Save the chat's system prompt as a preset; under a preset's name it replaces "
                                  "that preset's text (that is how a preset is edited)")
        self.delete_button = button("Delete", lambda: self.delete(),
                                    "Delete the chosen preset (chats that use its text keep it)")
        vbox(self.combo, hbox(self.save_button, self.delete_button), parent=self, margin=0)
        self.presets: list[dict] = []
        self.prompt_text = ""  # the chat's system prompt, as last shown (not `text`: QWidget kin have a text())
        self.picked: str | None = None  # the preset last picked: Save… offers its name, to edit it
        self.combo.activated.connect(self._on_activated)
        self.reload()

    def reload(self) -> None:
        self.presets = load_presets()
        self.show_text(self.prompt_text)

    def show_text(self, text: str) -> None:
        """The chat's system prompt changed (typed, or another chat opened): the box names its preset."""
        self.prompt_text = text
        name = find_preset(text, self.presets)
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.addItem(NONE)
        self.combo.addItems([p["name"] for p in self.presets])
        if text.strip() and name is None:
            self.combo.addItem(CUSTOM)  # only while the text is no preset's: it cannot be picked otherwise
        self.combo.setCurrentText(name or (CUSTOM if text.strip() else NONE))
        self.combo.blockSignals(False)
        self.delete_button.setEnabled(name is not None)

    def current(self) -> str | None:
        """The preset shown, if the chat's prompt is one."""
        text = self.combo.currentText()
        return text if any(p["name"] == text for p in self.presets) else None

    def pick(self, name: str) -> None:
        self.combo.setCurrentText(name)
        self._on_activated(self.combo.currentIndex())

    def _on_activated(self, _index: int) -> None:
        name = self.combo.currentText()
        if name == CUSTOM:
            return
        preset = next((p for p in self.presets if p["name"] == name), None)
        self.picked = preset["name"] if preset else None
        self.chosen.emit(preset["text"] if preset else "")

    def save(self, name: str | None = None) -> bool:
        """Save the chat's system prompt under a name: asked for (the picked preset's offered) unless given."""
        if name is None:
            name, ok = QInputDialog.getText(self, "Save system prompt", "Preset name:",
                                            text=self.current() or self.picked or "")
            if not ok:
                return False
        existing = next((p for p in self.presets if p["name"].casefold() == " ".join(name.split()).casefold()), None)
        try:
            self.presets = save_preset(name, self.prompt_text)
        except (HearthError, OSError) as exc:
            self.noticed.emit(Notice(str(exc) if isinstance(exc, HearthError) else
                                     f"The presets cannot be saved ({exc}).", ERROR, "presets"))
            return False
        shown = existing["name"] if existing else " ".join(name.split())
        self.picked = shown
        self.show_text(self.prompt_text)
        self.noticed.emit(Notice(f"Preset “{shown}” {'updated' if existing else 'saved'}.", INFO, "presets", 5))
        return True

    def delete(self, confirm: bool = True) -> bool:
        name = self.current()
        if name is None:
            return False
        if confirm and QMessageBox.question(self, "Delete preset", f"Delete the preset “{name}”?") != QMessageBox.Yes:
            return False
        try:
            self.presets = delete_preset(name)
        except OSError as exc:
            self.noticed.emit(Notice(f"The presets cannot be saved ({exc}).", ERROR, "presets"))
            return False
        self.show_text(self.prompt_text)
        self.noticed.emit(Notice(f"Preset “{name}” deleted; this chat keeps its text.", INFO, "presets", 5))
        return True
