"""The chat page's tool calls (MCP tools, app/tools): each call of the answer in progress shown as a block in the
transcript, and the bar under it that asks the user about the call that waits (Allow once, Always allow this
tool, Deny). A mixin of ChatView (app/ui/chat/chat_view.py), whose bridge and transcript it uses."""

from __future__ import annotations

import html
import json

from PySide6.QtWidgets import QWidget

from app.ui.widgets import STRETCH, button, hbox, vbox, wrapped


class ToolApproval:
    def _build_approval(self) -> None:
        """The bar that asks about the call that waits (hidden until one does)."""
        from app.tools.servers import ALWAYS, DENY, ONCE

        self._waiting_call: dict | None = None
        self.approval = QWidget()
        self.approval.setObjectName("toolApproval")
        self.approval_text = wrapped()  # the arguments may be long: the text has the row's whole width
        self.allow_once_button = button("Allow once", lambda: self.answer_call(ONCE))
        self.allow_always_button = button("Always allow this tool", lambda: self.answer_call(ALWAYS),
                                          "Run this tool of this server without asking again (the Tools page "
                                          "lists what is always allowed; removing the server forgets it)")
        self.deny_button = button("Deny", lambda: self.answer_call(DENY),
                                  "Do not run it; the model is told that you did not allow it")
        buttons = hbox(STRETCH, self.allow_once_button, self.allow_always_button, self.deny_button)
        vbox(self.approval_text, buttons, parent=self.approval).setContentsMargins(0, 4, 0, 4)
        self.approval.hide()
        self.bridge.tool_call_started.connect(self._on_tool_call)
        self.bridge.tool_approval_needed.connect(self._on_tool_approval_needed)
        self.bridge.tool_call_finished.connect(self._on_tool_call)

    def _on_tool_call(self, call: dict) -> None:
        """A call of the answer in progress appeared, or ended (its result, denial, stop or error)."""
        if not self.generating or self._detached:
            return
        if call.get("id") not in self.transcript.calls:
            self.transcript.stream_call(call)
        else:
            self.transcript.update_call(call)
        if self._waiting_call is not None and self._waiting_call.get("id") == call.get("id"):
            self._show_approval(None)

    def _on_tool_approval_needed(self, call: dict) -> None:
        if not self.generating or self._detached:
            return
        block = self.transcript.calls.get(call.get("id"))
        if block is not None:
            self.transcript.update_call({**block.call, "state": "waiting"})
        self._show_approval(call)

    def _show_approval(self, call: dict | None) -> None:
        self._waiting_call = call
        if call is not None:
            arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
            self.approval_text.setText(f"<b>Run {html.escape(call['server'])} · {html.escape(call['tool'])}</b> "
                                       f"{html.escape(arguments[:200])}? It runs as you, with your permissions.")
            self.approval_text.setToolTip(arguments)
            self.allow_once_button.setFocus()
        self.approval.setVisible(call is not None)

    def answer_call(self, decision: str) -> None:
        """The user's answer to the call that waits: Allow once, Always allow this tool, or Deny."""
        call = self._waiting_call
        if call is None:
            return
        self._show_approval(None)  # the block says "running…" when the answer's thread has it
        self.bridge.tools.answer(decision)
