"""The list of conversations: search, new, rename, delete."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QInputDialog, QLineEdit, QListWidget, QListWidgetItem, QMenu, QMessageBox, QWidget

from app.core.chats.store import ChatStore, ChatStoreError
from app.ui.widgets.notices import ERROR, Notice
from app.ui.widgets import button, hbox, vbox


class _ChatList(QListWidget):
    """The list of chats. Focus alone never opens one: Qt makes the first row current when Tab brings the focus to
    a list without one, which opened that chat and carried the unsent text into it (#55 B1). A click, the arrow
    keys or Enter still do."""

    focusing = False

    def focusInEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.focusing = True
        try:
            super().focusInEvent(event)
        finally:
            self.focusing = False


class ConversationList(QWidget):
    conversation_chosen = Signal(int)
    new_requested = Signal()
    conversation_deleted = Signal(int)
    noticed = Signal(object)  # a Notice: the history was busy or could not be written

    def __init__(self, store: ChatStore, parent=None):
        super().__init__(parent)
        self.store = store
        self.search = QLineEdit(placeholderText="Search chats")
        self.search.setAccessibleName("Search chats")
        self.search.setClearButtonEnabled(True)
        self.new_button = button("New chat", self.new_requested, "Start a new conversation (Ctrl+N)")
        self.list = _ChatList()
        self.list.setAccessibleName("Chats")
        self.list.setContextMenuPolicy(Qt.CustomContextMenu)
        # Long titles end in "…" (the full one is the tooltip) instead of a sideways scroll bar.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.ElideRight)
        self.list.setMinimumWidth(140)
        self.rename_button = button("Rename", self.rename_current)
        # Not connected directly: clicked(False) would land in delete_current's `confirm` and skip the question.
        self.delete_button = button("Delete", lambda: self.delete_current())
        vbox(hbox((self.search, 1), self.new_button), (self.list, 1), hbox(self.rename_button, self.delete_button),
             parent=self, margin=0)

        self.search.textChanged.connect(self.refresh)
        self.list.currentItemChanged.connect(self._on_current_changed)
        self.list.customContextMenuRequested.connect(self._on_context_menu)
        self._quiet = False
        self.refresh()

    def refresh(self, *_args, select: int | None = None) -> None:
        current = select if select is not None else self.current_id()
        self._quiet = True
        self.list.clear()
        for conv in self.store.list(self.search.text()):
            item = QListWidgetItem(conv.title)
            item.setData(Qt.UserRole, conv.id)
            item.setToolTip(conv.title)
            self.list.addItem(item)
            if conv.id == current:
                self.list.setCurrentItem(item)
        self._quiet = False

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return item.data(Qt.UserRole) if item else None

    def select(self, conversation_id: int) -> None:
        self.refresh(select=conversation_id)

    def _on_current_changed(self, current, _previous) -> None:
        if current is not None and not self._quiet and not self.list.focusing:
            self.conversation_chosen.emit(current.data(Qt.UserRole))

    def _on_context_menu(self, pos) -> None:
        if self.list.itemAt(pos) is None:
            return
        menu = QMenu(self)
        menu.addAction("Rename…", self.rename_current)
        menu.addAction("Delete", self.delete_current)
        menu.exec(self.list.mapToGlobal(pos))

    def rename_current(self, title: str | None = None) -> None:
        cid = self.current_id()
        if cid is None:
            return
        if not isinstance(title, str):
            conv = self.store.get(cid)
            title, ok = QInputDialog.getText(self, "Rename chat", "Name:", text=conv.title if conv else "")
            if not ok:
                return
        try:
            self.store.rename(cid, title)
        except ChatStoreError as exc:  # busy or full: the old name stays, and the user is told
            self.noticed.emit(Notice(f"The chat was not renamed: {exc}", ERROR, "chat.saving"))
            return
        self.refresh()

    def delete_current(self, confirm: bool = True) -> None:
        cid = self.current_id()
        if cid is None:
            return
        if confirm is not False:
            conv = self.store.get(cid)
            answer = QMessageBox.question(self, "Delete chat", f"Delete “{conv.title if conv else ''}”?")
            if answer != QMessageBox.Yes:
                return
        try:
            self.store.delete(cid)
        except ChatStoreError as exc:
            self.noticed.emit(Notice(f"The chat was not deleted: {exc}", ERROR, "chat.saving"))
            return
        self.refresh()
        self.conversation_deleted.emit(cid)
