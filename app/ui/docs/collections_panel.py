"""The chat page's Documents box: which collections this chat answers from, and the documents' budget.

The choice is kept per chat in the documents' index (app.docs.store: chat_collections); a new chat's choice is
kept once it has an id (its first message).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem, QSpinBox, QVBoxLayout, QWidget

from app.docs.store import Store


class CollectionsPanel(QWidget):
    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.conversation_id: int | None = None
        self._unsaved: list[str] = []  # chosen for a chat that has no id yet
        self.list = QListWidget()
        self.list.setMaximumHeight(110)
        self.list.setToolTip("Answer this chat's questions from these collections, citing their passages "
                             "(the Documents page makes them)")
        self.empty = QLabel("No collections yet: add a folder on the Documents page.")
        self.empty.setObjectName("hint")
        self.empty.setWordWrap(True)
        self.budget = QSpinBox()
        self.budget.setRange(0, 1_000_000)
        self.budget.setSingleStep(512)
        self.budget.setSpecialValueText("automatic")
        self.budget.setSuffix(" tokens")
        self.budget.setToolTip("Tokens the documents may take. Automatic: half the context minus the conversation. "
                               "A document within it goes in whole, a longer one by passages per question")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list)
        layout.addWidget(self.empty)
        budget_label = QLabel("Documents' budget:")
        layout.addWidget(budget_label)
        layout.addWidget(self.budget)
        self.list.itemChanged.connect(self._on_item_changed)
        self.refresh()

    def budget_override(self) -> int | None:
        return self.budget.value() or None

    def chosen(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())
                if self.list.item(i).checkState() == Qt.Checked]

    def refresh(self) -> None:
        """The collections as they are now, this chat's checked."""
        store = Store()
        try:
            names = [c.name for c in store.collections()]
            chosen = store.chat_collections(self.conversation_id) if self.conversation_id is not None else self._unsaved
        finally:
            store.close()
        blocked = self.list.blockSignals(True)
        self.list.clear()
        for name in names:
            item = QListWidgetItem(name)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if name in chosen else Qt.Unchecked)
            self.list.addItem(item)
        self.list.blockSignals(blocked)
        self.list.setVisible(bool(names))
        self.empty.setVisible(not names)

    def show_conversation(self, conversation_id: int | None) -> None:
        self.conversation_id = conversation_id
        self._unsaved = []
        self.refresh()

    def conversation_created(self, conversation_id: int) -> None:
        """A new chat got its id: the collections chosen before its first message are kept for it."""
        self.conversation_id = conversation_id
        self._save(self._unsaved)
        self._unsaved = []

    def _on_item_changed(self, _item) -> None:
        if self.conversation_id is None:
            self._unsaved = self.chosen()
        else:
            self._save(self.chosen())
        self.changed.emit()

    def _save(self, names: list[str]) -> None:
        store = Store()
        try:
            store.set_chat_collections(self.conversation_id, names)
        finally:
            store.close()
