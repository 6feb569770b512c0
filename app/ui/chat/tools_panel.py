"""The chat page's Tools box: which MCP servers' tools this chat may use (the Tools page configures them).

The choice is kept per chat in the chat store (ChatStore.chat_tools); a new chat's choice is kept once it has
an id (its first message), as the Documents box does with its collections.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem, QVBoxLayout, QWidget

from app.core.chats import ChatStore
from app.core.errors import HearthError


class ToolsPanel(QWidget):
    changed = Signal()

    def __init__(self, store: ChatStore, parent=None):
        super().__init__(parent)
        self.store = store
        self.conversation_id: int | None = None
        self._unsaved: list[str] = []  # chosen for a chat that has no id yet
        self.list = QListWidget()
        self.list.setMaximumHeight(90)
        self.list.setToolTip("The model may call these servers' tools in this chat; each call asks you first "
                             "(the Tools page adds servers)")
        self.empty = QLabel("No MCP servers yet: add one on the Tools page.")
        self.empty.setObjectName("hint")
        self.empty.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list)
        layout.addWidget(self.empty)
        self.list.itemChanged.connect(self._on_item_changed)
        self.refresh()

    def chosen(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())
                if self.list.item(i).checkState() == Qt.Checked]

    def refresh(self) -> None:
        """The servers of mcp.json as they are now, this chat's checked (a server it uses that is no longer
        configured stays listed, checked, so the chat's choice is not lost without a word)."""
        from app.tools.servers import load_servers

        try:
            names, problem = list(load_servers()), ""
        except HearthError as exc:  # a broken mcp.json: its sentence, and no servers
            names, problem = [], str(exc)
        chosen = self.store.chat_tools(self.conversation_id) if self.conversation_id is not None else self._unsaved
        blocked = self.list.blockSignals(True)
        self.list.clear()
        for name in names + [n for n in chosen if n not in names]:
            item = QListWidgetItem(name)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if name in chosen else Qt.Unchecked)
            if name not in names:
                item.setToolTip("No longer in mcp.json: an answer asks it and fails until it is added again")
            self.list.addItem(item)
        self.list.blockSignals(blocked)
        self.list.setVisible(self.list.count() > 0)
        self.empty.setText(problem or "No MCP servers yet: add one on the Tools page.")
        self.empty.setVisible(self.list.count() == 0)

    def show_conversation(self, conversation_id: int | None) -> None:
        self.conversation_id = conversation_id
        self._unsaved = []
        self.refresh()

    def conversation_created(self, conversation_id: int) -> None:
        """A new chat got its id: the servers chosen before its first message are kept for it."""
        self.conversation_id = conversation_id
        self.store.set_chat_tools(conversation_id, self._unsaved)
        self._unsaved = []

    def set_chosen(self, names: list[str]) -> None:
        """Check these servers (and no others) for this chat, as the user would."""
        for i in range(self.list.count()):
            item = self.list.item(i)
            item.setCheckState(Qt.Checked if item.text() in names else Qt.Unchecked)

    def _on_item_changed(self, _item) -> None:
        if self.conversation_id is None:
            self._unsaved = self.chosen()
        else:
            self.store.set_chat_tools(self.conversation_id, self.chosen())
        self.changed.emit()
