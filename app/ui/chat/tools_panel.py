"""The chat page's Tools box: which MCP servers' tools this chat may use (the Tools page configures them).

The choice is kept per chat in the chat store (ChatStore.chat_tools); a new chat's choice is kept once it has
an id (its first message), as the Documents box does with its collections.
"""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.chats.store import ChatStore
from app.core.errors import HearthError
from app.ui.widgets import ChatChoice, combo

NO_SERVERS = "No MCP servers yet: add one on the Tools page."
# How the model uses the chosen tools (tool_chat's choice; the CLI's --tool-choice): "required" forces a call with a
# grammar, which a model not trained for tools needs to make one at all (#55 E1).
CHOICES = {"auto": "The model decides", "required": "Always call a tool"}


class ToolsPanel(ChatChoice):
    def __init__(self, store: ChatStore, parent=None):
        super().__init__("The model may call these servers' tools in this chat; each call asks you first "
                         "(the Tools page adds servers)", NO_SERVERS, 90, parent)
        self.store = store
        self.choice = combo(CHOICES)
        self.choice.setAccessibleName("How the model uses tools")
        self.choice.setToolTip("The model decides whether to call a tool; or it must call one (a grammar makes it "
                               "write a valid call: a model not trained for tools needs this to make one)")
        self.layout().insertWidget(1, self.choice)
        self.refresh()

    def tool_choice(self) -> str:
        return self.choice.currentData()

    def refresh(self) -> None:
        """The servers of mcp.json as they are now, this chat's checked (a server it uses that is no longer
        configured stays listed, checked, so the chat's choice is not lost without a word)."""
        from app.tools.servers import load_servers

        try:
            names, problem = list(load_servers()), ""
        except HearthError as exc:  # a broken mcp.json: its sentence, and no servers
            names, problem = [], str(exc)
        chosen = self.chat_choice()
        gone = [n for n in chosen if n not in names]
        self._fill(names + gone, chosen, {n: "No longer in mcp.json: an answer asks it and fails until it is added "
                                             "again" for n in gone})
        self.empty.setText(problem or NO_SERVERS)
        self.choice.setVisible(bool(names + gone))

    def _saved(self, conversation_id: int) -> list[str]:
        return self.store.chat_tools(conversation_id)

    def _save(self, names: list[str]) -> None:
        self.store.set_chat_tools(self.conversation_id, names)

    def set_chosen(self, names: list[str]) -> None:
        """Check these servers (and no others) for this chat, as the user would."""
        for i in range(self.list.count()):
            item = self.list.item(i)
            item.setCheckState(Qt.Checked if item.text() in names else Qt.Unchecked)
