"""The chat page's Documents box: which collections this chat answers from, and the documents' budget.

The choice is kept per chat in the documents' index (app.docs.store: chat_collections); a new chat's choice is
kept once it has an id (its first message).
"""

from __future__ import annotations

from contextlib import closing

from PySide6.QtWidgets import QLabel

from app.docs.store import Store
from app.ui.widgets.clamped_spin import ClampingSpinBox
from app.ui.widgets import ChatChoice


class CollectionsPanel(ChatChoice):
    def __init__(self, parent=None):
        super().__init__("Answer this chat's questions from these collections, citing their passages "
                         "(the Documents page makes them)", "No collections yet: add a folder on the Documents page.",
                         110, parent)
        self.budget = ClampingSpinBox("The documents' budget")
        self.budget.setRange(0, 1_000_000)
        self.budget.setSingleStep(512)
        self.budget.setSpecialValueText("automatic")
        self.budget.setSuffix(" tokens")
        self.budget.setToolTip("Tokens the documents may take. Automatic: half the context minus the conversation. "
                               "A document within it goes in whole, a longer one by passages per question")
        layout = self.layout()
        layout.addWidget(QLabel("Documents' budget:"))
        layout.addWidget(self.budget)
        self.refresh()

    def budget_override(self) -> int | None:
        return self.budget.value() or None

    def refresh(self) -> None:
        """The collections as they are now, this chat's checked."""
        with closing(Store()) as store:  # one opening for both: this runs at every switch of chats
            names = [c.name for c in store.collections()]
            chosen = store.chat_collections(self.conversation_id) if self.conversation_id is not None \
                else self._unsaved
        self._fill(names, chosen)

    def _saved(self, conversation_id: int) -> list[str]:
        with closing(Store()) as store:
            return store.chat_collections(conversation_id)

    def _save(self, names: list[str]) -> None:
        with closing(Store()) as store:
            store.set_chat_collections(self.conversation_id, names)
