"""The chat page: conversations, transcript, input, system prompt and sampling.

The answer in progress belongs to the conversation it was asked in. When the
engine fails mid-answer, what was generated is kept (in the transcript and in
the store) with an error line; switching conversations mid-answer stops it.

Nothing a user wrote or was answered is thrown away: regenerating any answer
(the Regenerate button: the last one; each answer's header: that one) adds a
version of it, and editing any question adds a version of it. The store keeps
each version with what followed it, so regenerating an earlier answer starts a
new branch there and the header's < 2/3 > pages back to the old branch whole.

Each answer is signed with the model (and the server, for a remote one) that wrote it, in its meta and its
header. A conversation remembers the model of its latest answer: opened while another model answers, a line
above the transcript says so and offers to load it (or says why it cannot). An answer cut off by the length
limit (or stopped) has Continue in its header: the model goes on from where it stopped, as a prefill of the
same answer, which the store keeps as one message.

A chat with MCP servers enabled (its Tools box) answers through app/tools/tool_chat on the bridge's worker
thread (EngineBridge.chat_with_tools). Each call shows as a block in the answer and waits for the user's
Allow once / Always allow this tool / Deny under the transcript; Esc or Stop ends a waiting or running call
(recorded as stopped) and the generation. The calls and results are kept in the answer's meta ("tool_calls"),
so reopening, regenerating, branches and export see them, and the next question sends them to the model again.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QGroupBox, QHBoxLayout, QLabel, QMessageBox, QPlainTextEdit, QPushButton, QSplitter,
                               QVBoxLayout, QWidget)

from app.core.answer_saving import INTERRUPTED, SAVE_INTERVAL_S, StreamingAnswer, recover_interrupted
from app.core.chats import (DEFAULT_TITLE, ChatStore, ChatStoreError, answer_model, remembered_model, title_from,
                            tool_turn_messages)
from app.core.reasoning import without_reasoning
from app.docs.conversation import KEY as ATTACHMENTS
from app.docs.conversation import ConversationDocs, chip_text
from app.ui.chat.conversation_list import ConversationList
from app.ui.chat.model_picker import ModelPicker
from app.ui.chat.prompt_presets import PromptPresets
from app.ui.chat.sampling_panel import SamplingPanel
from app.ui.chat.tools_panel import ToolsPanel
from app.ui.chat.transcript import Transcript
from app.ui.docs.attach_bar import AttachBar, FileDrops
from app.ui.docs.collections_panel import CollectionsPanel
from app.ui.engine_bridge import EngineBridge, model_title
from app.ui.models.titles import path_title
from app.ui.widgets import ElidedLabel
from app.ui.worker import Tasks


class PromptEdit(QPlainTextEdit):
    """The message box: Enter sends and Shift+Enter makes a new line, as in LM Studio, Jan and GPT4All;
    with enter_sends off (Settings), Enter makes a new line. Ctrl+Enter always sends."""

    submitted = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.enter_sends = True

    def set_enter_sends(self, on: bool) -> None:
        self.enter_sends = on
        self.setPlaceholderText("Message the model. " + ("Enter sends, Shift+Enter adds a line" if on else
                                                         "Ctrl+Enter sends, Enter adds a line") + ", Esc stops.")

    def keyPressEvent(self, event):
        if event.key() in (Qt.Key_Return, Qt.Key_Enter):
            mods = event.modifiers()
            if mods & Qt.ControlModifier or (self.enter_sends and not mods & (Qt.ShiftModifier | Qt.AltModifier)):
                self.submitted.emit()
                return
            if self.enter_sends:  # Shift+Enter: a plain new line, not Qt's line separator
                self.insertPlainText("\n")
                return
        super().keyPressEvent(event)


# An answer drafted from the old one is judged on its speed only from this length on: a few tokens' speed is noise.
JUDGED_TOKENS = 32
WAITING_TURN = ("Waiting its turn: the engine is answering API requests first (Server page); this answer starts "
                "after them.")


class ChatView(QWidget):
    generation_started = Signal()
    answer_saved = Signal(int)  # message id
    conversation_changed = Signal()  # another conversation (or a new one) is open
    model_load_requested = Signal(str)  # the remembered model's path: the chat's "Load it"
    docs_problem = Signal(str)  # a file that could not be attached or read, in one sentence
    tools_problem = Signal(str)  # what the user should know about an answer's tool calls, in one sentence
    # Drafting a regenerated or edited answer from the old one made it slower (its speed against plain decoding).
    answer_drafts_cost_speed = Signal(float)

    def __init__(self, bridge: EngineBridge, store: ChatStore, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.store = store
        try:  # the answers a crash of the window cut off, saved marked interrupted before the chats are listed
            recover_interrupted(store)
        except ChatStoreError:  # busy: they stay in the store for the next start
            pass
        self.conversation_id: int | None = None
        self._gen_conversation: int | None = None  # where the answer in progress goes
        self._detached = False  # the user switched away mid-answer
        self._editing: int | None = None  # message id being edited (edit-and-resend)
        self._regenerating: int | None = None  # the answer the one in progress is a new version of
        self._failed = False  # the latest answer ended in an error: Regenerate retries it
        self._reading = ""  # how far the engine has read a long prompt, until the answer's first figures
        self.sampling_overrides: dict = {}  # set by `hearth bench gui` (ignore_eos), not shown to users
        # Regenerate and Edit draft from the answer they replace (predicted outputs): the load settings' own
        # checkbox, whatever the load's speculative decoding says (#49.4).
        self.reuse_answer_drafts = True
        self._continuing = None  # the answer (a Message) the one in progress continues
        self._answer: StreamingAnswer | None = None  # the answer in progress, as the store keeps it while it streams
        self._save_timer = QTimer(self)
        self._save_timer.setInterval(int(SAVE_INTERVAL_S * 1000))
        self._save_timer.timeout.connect(self._save_answer)
        self._answer_model: dict = {}  # which model the answer in progress was asked of
        self.remembered: dict = {}  # the open conversation's model (its latest answer's), see remembered_model
        # What the window calls a model file; the main window gives the library's names (Models page).
        self.model_title = lambda path: path_title(path, [])
        # Documents (#34): files attached to a message (kept on it), collections per chat, and the passages the
        # answer in progress was given. A prompt with documents is built on a worker thread (a question's
        # embedding runs in the embedding engine); _preparing is that time, before the engine is asked.
        self.docs = ConversationDocs()
        self.doc_tasks = Tasks(self)
        self._preparing = False
        self._prep_id = 0
        self._answer_sources: list = []
        self.attach_bar = AttachBar(self.docs, self._model_path)
        self.collections_panel = CollectionsPanel()
        # Tools (#35): the chat's MCP servers, and the bar that asks the user about the call that waits.
        self.tools_panel = ToolsPanel(store)
        # Set by tests (a 135M model cannot choose tools): {"choice", "forced", "pinned", "max_rounds"} of tool_chat.
        self.tool_overrides: dict = {}
        self._waiting_call: dict | None = None
        self.approval = QWidget()
        self.approval.setObjectName("toolApproval")
        approval_col = QVBoxLayout(self.approval)
        approval_col.setContentsMargins(0, 4, 0, 4)
        self.approval_text = QLabel()
        self.approval_text.setWordWrap(True)  # the arguments may be long: the text has the row's whole width
        approval_col.addWidget(self.approval_text)
        approval_row = QHBoxLayout()
        approval_row.addStretch(1)
        approval_col.addLayout(approval_row)
        self.allow_once_button = QPushButton("Allow once")
        self.allow_always_button = QPushButton("Always allow this tool")
        self.allow_always_button.setToolTip("Run this tool of this server without asking again (the Tools page "
                                            "lists what is always allowed; removing the server forgets it)")
        self.deny_button = QPushButton("Deny")
        self.deny_button.setToolTip("Do not run it; the model is told that you did not allow it")
        for button in (self.allow_once_button, self.allow_always_button, self.deny_button):
            approval_row.addWidget(button)
        self.approval.hide()

        self.conversations = ConversationList(store)
        self.picker = ModelPicker()
        self.transcript = Transcript()
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("System prompt (optional): how the assistant should behave")
        self.system_prompt.setFixedHeight(52)
        self.input = PromptEdit()
        self.input.set_enter_sends(True)
        self.input.setFixedHeight(84)
        self.send_button = QPushButton("Send")
        self.send_button.setToolTip("Send (Enter, or Ctrl+Enter)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the answer (Esc)")
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.setToolTip("Ask for another last answer; the earlier ones stay (page with ‹ ›). "
                                     "Every answer has Regenerate in its header")
        self.edit_button = QPushButton("Edit last")
        self.edit_button.setToolTip("Put your last message back in the box; the old one stays as a version "
                                    "(every message has Edit in its header)")
        self.hint = QLabel()
        self.hint.setObjectName("chatHint")
        self.hint.setWordWrap(True)  # a long hint (editing a message) must not widen the window past the screen
        self.sampling = SamplingPanel()
        self.prompt_presets = PromptPresets()
        # The conversation's own model, when another one answers now: said above the transcript, with Load.
        self.model_banner = QWidget()
        self.model_banner.setObjectName("modelBanner")
        banner_row = QHBoxLayout(self.model_banner)
        banner_row.setContentsMargins(0, 0, 0, 0)
        self.model_note = QLabel()
        self.model_note.setObjectName("hint")
        self.model_note.setWordWrap(True)  # a long model name or path must not widen the page
        self.model_load_button = QPushButton("Load it")
        banner_row.addWidget(self.model_note, 1)
        banner_row.addWidget(self.model_load_button)
        self.model_banner.hide()

        center = QWidget()
        col = QVBoxLayout(center)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.picker)
        col.addWidget(self.system_prompt)
        col.addWidget(self.model_banner)
        col.addWidget(self.transcript, 1)
        col.addWidget(self.approval)
        col.addWidget(self.hint)
        col.addWidget(self.attach_bar)
        col.addWidget(self.input)
        row = QHBoxLayout()
        row.addWidget(self.edit_button)
        row.addWidget(self.regen_button)
        row.addStretch(1)
        row.addWidget(self.stop_button)
        row.addWidget(self.send_button)
        col.addLayout(row)

        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(0, 0, 0, 0)
        prompts = QGroupBox("System prompt")
        QVBoxLayout(prompts).addWidget(self.prompt_presets)
        sampling = QGroupBox("Sampling")
        QVBoxLayout(sampling).addWidget(self.sampling)
        documents = QGroupBox("Documents")
        QVBoxLayout(documents).addWidget(self.collections_panel)
        tools = QGroupBox("Tools")
        QVBoxLayout(tools).addWidget(self.tools_panel)
        side_layout.addWidget(prompts)
        side_layout.addWidget(sampling)
        side_layout.addWidget(documents)
        side_layout.addWidget(tools)
        side_layout.addStretch(1)

        splitter = QSplitter()
        splitter.addWidget(self.conversations)
        splitter.addWidget(center)
        splitter.addWidget(side)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([200, 800, 220])  # the conversation gets the room a narrow screen has
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(splitter)

        self.send_button.clicked.connect(self.send)
        self.input.submitted.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.regen_button.clicked.connect(lambda: self.regenerate())  # not clicked(False) as the answer id
        self.edit_button.clicked.connect(self.edit_last)
        self.transcript.action_requested.connect(self._on_message_action)
        self.transcript.source_requested.connect(self.show_source)
        self.attach_bar.problem.connect(self.docs_problem)
        self.file_drops = FileDrops(self.attach_bar, [self.transcript.viewport(), self.input.viewport()])
        self.model_load_button.clicked.connect(self._on_load_remembered)
        self.conversations.conversation_chosen.connect(self.open_conversation)
        self.conversations.new_requested.connect(self.new_conversation)
        self.conversations.conversation_deleted.connect(self._on_conversation_deleted)
        self.system_prompt.textChanged.connect(self._on_system_prompt_changed)
        self.prompt_presets.chosen.connect(self.system_prompt.setPlainText)
        from app.tools.servers import ALWAYS, DENY, ONCE

        self.allow_once_button.clicked.connect(lambda: self.answer_call(ONCE))
        self.allow_always_button.clicked.connect(lambda: self.answer_call(ALWAYS))
        self.deny_button.clicked.connect(lambda: self.answer_call(DENY))
        bridge.tool_call_started.connect(self._on_tool_call)
        bridge.tool_approval_needed.connect(self._on_tool_approval_needed)
        bridge.tool_call_finished.connect(self._on_tool_call)
        bridge.token_received.connect(self._on_token_received)
        bridge.turn_started.connect(self._update_buttons)
        bridge.prompt_progress.connect(self._on_prompt_progress)
        bridge.stats_received.connect(self._on_answer_started)
        bridge.generation_finished.connect(self._on_generation_finished)
        bridge.generation_failed.connect(self._on_generation_failed)
        bridge.engine_crashed.connect(self._on_generation_failed)
        bridge.model_loaded.connect(self._update_buttons)
        # The settings the user has not set show the loaded model's own recommendation (general.sampling.*).
        bridge.model_loaded.connect(lambda *_: self.sampling.show_recommended(
            (self.bridge.info or {}).get("recommended_sampling") or {}))
        bridge.model_loading.connect(self._update_buttons)
        bridge.load_failed.connect(self._update_buttons)
        bridge.backend_changed.connect(self._update_buttons)
        bridge.model_unloaded.connect(self._update_buttons)
        for signal in (bridge.model_loaded, bridge.model_loading, bridge.load_failed, bridge.backend_changed,
                       bridge.model_unloaded):
            signal.connect(self._update_model_banner)

        first = store.list()
        if first:
            self.open_conversation(first[0].id)
            self.conversations.select(first[0].id)
        self._update_buttons()

    # --- state ------------------------------------------------------------
    @property
    def generating(self) -> bool:
        return self._gen_conversation is not None or self._preparing

    def _model_path(self) -> str | None:
        """The local chat model's file, whose vocabulary counts the documents' tokens (None: remote or none)."""
        info = self.bridge.info if self.bridge.ready else None
        return None if not info or self.bridge.remote else info.get("path")

    @property
    def refusal(self) -> str | None:
        """Why the loaded model cannot chat (an embedding or reranking model), said before anything is sent."""
        info = self.bridge.info if self.bridge.ready else None
        return (info or {}).get("cannot_generate") or None

    def _update_buttons(self, *_args) -> None:
        ready = self.bridge.ready
        refusal = self.refusal
        self.send_button.setEnabled(ready and not refusal and not self.generating)
        self.send_button.setToolTip(refusal or "Send (Enter, or Ctrl+Enter)")
        self.stop_button.setEnabled(self.generating)
        has_turn = self.conversation_id is not None and self.store.has_message(self.conversation_id, "user")
        self.regen_button.setEnabled(ready and not refusal and not self.generating and has_turn)
        self.edit_button.setEnabled(not self.generating and has_turn)
        if self.bridge.loading:
            self.hint.setText("Loading the model…")
        elif not ready:
            self.hint.setText("No model is loaded. Choose one above and press Load.")
        elif refusal:
            self.hint.setText(refusal)
        elif self.generating and not self._detached and self.bridge.waiting_turn:
            self.hint.setText(WAITING_TURN)
        elif self.generating and not self._detached and self._reading:
            self.hint.setText(self._reading)
        elif self._preparing:
            self.hint.setText("Finding the passages that answer it in the documents…")
        elif self._editing is not None:
            self.hint.setText("Editing a message: sending asks again from there; the old version stays "
                              "(‹ › in its header). Esc cancels the edit.")
        elif self._failed and has_turn:
            self.hint.setText("The last answer did not finish; Regenerate asks again.")
        else:
            self.hint.setText("")
        self.hint.setVisible(bool(self.hint.text()))

    # --- which model ----------------------------------------------------------
    def current_model(self) -> dict:
        """The model that answers now, as an answer is signed with it ({} when none is loaded)."""
        info = self.bridge.info if self.bridge.ready else None
        if not info:
            return {}
        if self.bridge.remote:
            return {"model": model_title(info), "endpoint": info.get("endpoint") or self.bridge.backend.base_url}
        return {"model": self.model_title(info.get("path")), "model_path": info.get("path", "")}

    def _update_model_banner(self, *_args) -> None:
        """Say when the open conversation's own model is not the one that answers now, and offer to load it."""
        want, now = self.remembered, self.current_model()
        text, offer, tip = "", None, ""
        same = want and ((want.get("model_path") and want.get("model_path") == now.get("model_path")) or (
            want.get("endpoint") and want.get("endpoint") == now.get("endpoint") and want["model"] == now["model"]))
        if want and not same and not self.bridge.loading:
            current = f"{now['model']} answers now" if now else "no model is loaded"
            if want.get("model_path"):
                path = Path(want["model_path"])
                if path.is_file():
                    text = f"This chat was with {self.model_title(str(path))}; {current}."
                    offer = str(path)
                else:  # short: at 1024 pixels a longer line took four rows from the transcript
                    text = f"This chat was with {want['model']}, no longer at {path.parent}; {current}."
                    tip = "Choose a model above, or import the file again (File > Import model…)."
            elif want.get("endpoint"):
                text = f"This chat was with {want['model']} on {want['endpoint']} (Connections); {current}."
                tip = "Connect to that server again on the Connections page to go on with its model."
        self.model_note.setText(text)
        self.model_note.setToolTip(tip)
        self._offered = offer
        self.model_load_button.setVisible(offer is not None)
        self.model_load_button.setToolTip(f"Load {self.model_title(offer)} with its own load settings" if offer else "")
        self.model_banner.setVisible(bool(text))

    def _on_load_remembered(self) -> None:
        if getattr(self, "_offered", None):
            self.model_load_requested.emit(self._offered)

    # --- conversations ------------------------------------------------------
    def new_conversation(self) -> None:
        self._leave_current()
        self.conversation_id = None
        self._editing = None
        self.transcript.clear_all()
        self.system_prompt.blockSignals(True)
        self.system_prompt.setPlainText("")
        self.system_prompt.blockSignals(False)
        self.prompt_presets.show_text("")
        self.conversations.list.clearSelection()
        self.conversations.list.setCurrentItem(None)
        self.input.setFocus()
        self.remembered = {}
        self.collections_panel.show_conversation(None)
        self.tools_panel.show_conversation(None)
        self._update_model_banner()
        self._update_buttons()
        self.conversation_changed.emit()

    def open_conversation(self, conversation_id: int) -> None:
        if conversation_id == self.conversation_id:
            return
        conv = self.store.get(conversation_id)
        if conv is None:
            return
        self._leave_current()
        self.conversation_id = conversation_id
        self._editing = None
        self._failed = False
        self.system_prompt.blockSignals(True)
        self.system_prompt.setPlainText(conv.system_prompt)
        self.system_prompt.blockSignals(False)
        self.prompt_presets.show_text(conv.system_prompt)
        self.collections_panel.show_conversation(conversation_id)
        self.tools_panel.show_conversation(conversation_id)
        self._render_conversation()
        self._update_model_banner()
        self._update_buttons()
        self.conversation_changed.emit()

    def _render_conversation(self, before: int | None = None) -> None:
        """Show the open conversation; before: only the messages before this one (the answer being
        regenerated: its new version streams after them, and what followed it waits in the store)."""
        shown: list[tuple] = []
        msgs = self.store.messages(self.conversation_id)
        self.remembered = remembered_model(msgs)
        for msg in msgs:
            if before is not None and msg.id >= before:
                break
            shown.append((msg.role, msg.content, self._note(msg.meta), self._links(msg, msg is msgs[-1]),
                          msg.meta.get("thought_s"), msg.meta.get("tool_calls") or None))
            if msg.meta.get("error"):
                shown.append(("error", msg.meta["error"], ""))
        self.transcript.show_messages(shown)

    @staticmethod
    def _links(msg, last: bool = False) -> list[tuple[str, str | None]]:
        """last: the conversation's last message, which alone can be continued (what follows would not fit)."""
        links: list[tuple[str, str | None]] = [("Copy", f"message-copy:{msg.id}")]
        if msg.role == "user":
            links.append(("Edit", f"edit:{msg.id}"))
        elif msg.role == "assistant":
            links.append(("Regenerate", f"regenerate:{msg.id}"))
            if last and msg.content and msg.meta.get("finish_reason") in ("length", "cancelled", INTERRUPTED):
                links.append(("Continue", f"continue:{msg.id}"))
            # The passages the answer was given, each opening its text: [1] manual.pdf p. 2
            links += [(f"[{src['n']}] {src['where']}", f"source:{msg.id}.{src['n']}")
                      for src in msg.meta.get("sources") or []]
        if msg.versions > 1:
            links += [("‹", f"prev:{msg.id}" if msg.version > 1 else None), (f"{msg.version}/{msg.versions}", None),
                      ("›", f"next:{msg.id}" if msg.version < msg.versions else None)]
        return links

    def _on_message_action(self, action: str, message_id: int) -> None:
        msg = self.store.message(message_id)
        if msg is None:
            return
        if action == "copy":  # an answer without its thinking, as it is shown
            text = without_reasoning(msg.content) if msg.role == "assistant" else msg.content
            QGuiApplication.clipboard().setText(text)
            self.transcript.message_copied.emit(text)
        elif action == "edit":
            self.edit_message(message_id)
        elif action == "regenerate":
            self.regenerate(message_id)
        elif action == "continue":
            self.continue_answer(message_id)
        elif action in ("prev", "next") and not self.generating:
            self.store.show_version(message_id, msg.version + (1 if action == "next" else -1))
            self._editing = None
            self._render_conversation()
            self._update_buttons()

    def copy_last_answer(self) -> bool:
        """The open chat's last answer on the clipboard, as it is shown (without its thinking); False if none."""
        if self.conversation_id is None:
            return False
        answer = next((m for m in reversed(self.store.messages(self.conversation_id))
                       if m.role == "assistant" and m.content), None)
        if answer is None:
            return False
        self._on_message_action("copy", answer.id)
        return True

    def _leave_current(self) -> None:
        if self._preparing:
            self._drop_preparation()
        elif self.generating and not self._detached:
            self._save_answer()  # what was shown is kept until the engine's Done brings the whole answer
            self._save_timer.stop()
            self._detached = True
            self.transcript.end_stream()
            self.bridge.cancel()

    def _on_conversation_deleted(self, conversation_id: int) -> None:
        if conversation_id == self.conversation_id:
            self.conversation_id = None
            self.new_conversation()

    def _on_system_prompt_changed(self) -> None:
        self.prompt_presets.show_text(self.system_prompt.toPlainText())
        if self.conversation_id is not None:
            self.store.set_system_prompt(self.conversation_id, self.system_prompt.toPlainText())

    # --- sending ------------------------------------------------------------
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.generating or not self.bridge.ready or self.refusal:
            return
        if self.conversation_id is None:
            self.conversation_id = self.store.create(title_from(text), self.system_prompt.toPlainText())
            self.collections_panel.conversation_created(self.conversation_id)
            self.tools_panel.conversation_created(self.conversation_id)
            self.conversations.select(self.conversation_id)
        else:
            conv = self.store.get(self.conversation_id)
            if conv is not None and conv.title == DEFAULT_TITLE:
                self.store.rename(self.conversation_id, title_from(text))
                self.conversations.refresh()
        prediction = ""
        if self._editing is not None:
            # The answer to the question as it was: an edited question is mostly answered the same way.
            prediction = self._answer_after(self._editing)
            # The edited question keeps the files it came with (the new branch sees the same documents).
            kept = (self.store.message(self._editing).meta.get(ATTACHMENTS) or []) if self.store.message(
                self._editing) else []
            self.store.add_version(self._editing, text, self._attachments_meta(text, kept, self._editing))
            self._editing = None
            self._render_conversation()
        else:
            meta = self._attachments_meta(text)
            asked = self.store.message(self.store.add_message(self.conversation_id, "user", text, meta))
            self.transcript.append_message("user", text, self._note(asked.meta),
                                           links=self._links(asked))  # Copy and Edit at once
        self.input.clear()
        self._ask(prediction)

    def _attachments_meta(self, text: str, kept: list | None = None, before: int | None = None) -> dict:
        """The new message's meta: the files attached to it (kept ones first), each decided whole or by passages
        against the budget (half the context minus the conversation before it, unless set)."""
        pending = self.attach_bar.take()
        if not pending:
            return {ATTACHMENTS: kept} if kept else {}
        spoken = [m.content for m in self.store.messages(self.conversation_id) if before is None or m.id < before]
        n_ctx = int((self.bridge.info or {}).get("n_ctx") or 4096)
        decided = self.docs.decide(pending, spoken + [text], self.docs.count(self._model_path()), n_ctx,
                                   self.collections_panel.budget_override())
        return {ATTACHMENTS: (kept or []) + decided}

    def show_source(self, message_id: int, n: int) -> None:
        """An answer's source [n]: the passage, its file, page or heading and characters."""
        msg = self.store.message(message_id)
        source = next((s for s in (msg.meta.get("sources") or []) if s.get("n") == n), None) if msg else None
        if source is None:
            return
        box = QMessageBox(self)
        box.setWindowTitle(f"[{n}] {source.get('where')}")
        box.setText(f"{source.get('path')}, characters {source.get('start')}-{source.get('end')}"
                    + (f" (collection {source['collection']})" if source.get("collection") not in (None, "attached")
                       else ""))
        box.setInformativeText(source.get("text") or "")
        box.open()
        self.source_box = box  # kept for tests and so it is not collected while open

    def close_documents(self) -> None:
        """The window closes: the documents' threads end and the embedding engine stops."""
        self.attach_bar.join()
        self.doc_tasks.join()
        self.docs.close()

    def _answer_after(self, question_id: int) -> str:
        msgs = self.store.messages(self.conversation_id)
        at = next((i for i, m in enumerate(msgs) if m.id == question_id), None)
        following = msgs[at + 1] if at is not None and at + 1 < len(msgs) else None
        return following.content if following is not None and following.role == "assistant" else ""

    def _ask(self, prediction: str = "") -> None:
        """Ask for the next answer; `prediction`, the answer it replaces, lets the engine draft from it
        (predicted outputs: the same answer, sooner)."""
        self._failed = False
        self._reading = ""
        # The answer being regenerated stays in the store (as a version) until the new one replaces it, but it
        # is not part of what the model is asked.
        before = self._regenerating
        continued = self._continuing.id if self._continuing is not None else None
        # Earlier answers without their thinking, as reasoning models want them (the store keeps it all); an
        # answer being continued goes whole, thinking and all: it is this turn's, and the model goes on with it.
        stored = [m for m in self.store.messages(self.conversation_id)
                  if m.role in ("user", "assistant") and (before is None or m.id < before)]
        # An answer with tool calls goes back as the model made it: its calls, their results, then its words.
        messages, metas = [], []
        for m in stored:
            if m.role == "assistant":
                turn = tool_turn_messages(without_reasoning(m.content) if m.id != continued else m.content, m.meta)
                messages += turn
                metas += [{}] * len(turn)
            else:
                messages.append({"role": m.role, "content": m.content})
                metas.append(m.meta)
        sampling = self.sampling.options()
        sampling.prediction = prediction if self.reuse_answer_drafts else ""
        for key, value in self.sampling_overrides.items():
            setattr(sampling, key, value)
        collections = self.collections_panel.chosen()
        if collections or any(m.meta.get(ATTACHMENTS) for m in stored):
            # The documents' prompt on a worker; the answer is asked when it is ready (_send).
            with_meta = [{**m, "meta": meta} for m, meta in zip(messages, metas)]
            model, n_ctx = self._model_path(), int((self.bridge.info or {}).get("n_ctx") or 4096)
            override = self.collections_panel.budget_override()
            self._preparing = True
            self._prep_id += 1
            token = self._prep_id
            self._update_buttons()
            self.doc_tasks.run(lambda: self.docs.prompt(with_meta, collections, model, n_ctx, override),
                               lambda built: self._send(built[0], sampling, built[1], built[2], token),
                               lambda message: self._on_docs_failed(message, token), name="docs-prompt")
            return
        self._send(messages, sampling)

    def _drop_preparation(self) -> None:
        """Stopped, or another chat opened, while the passages were being found: nothing is asked."""
        self._preparing = False
        self._prep_id += 1
        if self._regenerating is not None or self._continuing is not None:
            self._regenerating = self._continuing = None
            self._render_conversation()
        self._update_buttons()

    def _on_docs_failed(self, message: str, token: int) -> None:
        if token != self._prep_id or not self._preparing:
            return
        self._preparing = False
        if self._regenerating is not None or self._continuing is not None:
            self._regenerating = self._continuing = None
            self._render_conversation()
        self.transcript.append_message("error", message)
        self._update_buttons()

    def _send(self, messages: list[dict], sampling, sources: list | None = None, problems: list | None = None,
              token: int | None = None) -> None:
        """Ask the engine for the answer to messages; sources: the passages they carry (kept with the answer).
        token: the preparation this comes from (a stopped or superseded one asks nothing)."""
        if token is not None:
            if token != self._prep_id or not self._preparing:
                return
            self._preparing = False
        for sentence in problems or []:
            self.docs_problem.emit(sentence)
        self._answer_sources = list(sources or [])
        system = self.system_prompt.toPlainText().strip()
        if system:
            messages.insert(0, {"role": "system", "content": system})
        self._answer_model = self.current_model()
        servers = self.tools_panel.chosen()
        if servers:
            sampling.prediction = ""  # the old answer's tokens cannot draft a call the grammar writes
            asked = self.bridge.chat_with_tools(messages, sampling, servers, self.tool_overrides.get("choice", "auto"),
                                                self.tool_overrides.get("forced"), self.tool_overrides.get("pinned"),
                                                self.tool_overrides.get("max_rounds"))
        else:
            asked = self.bridge.chat(messages, sampling)
        if not asked:
            if self._regenerating is not None or self._continuing is not None:
                self._regenerating = self._continuing = None
                self._render_conversation()
            self.transcript.append_message("error", "The engine is not ready; try again in a moment.")
            return
        self._gen_conversation = self.conversation_id
        self._detached = False
        # Saved while it streams (app/core/answer_saving.py): a crash of the window costs at most the last second.
        self._answer = StreamingAnswer(self.store, self.conversation_id, self._answer_model,
                                       regenerating=self._regenerating, continuing=self._continuing)
        self._save_timer.start()
        # A template that opens <think> in the prompt (DeepSeek-R1's): the answer starts inside its thinking.
        self.transcript.begin_stream(opened=bool((self.bridge.info or {}).get("opens_thinking")))
        if self._continuing is not None:  # the answer so far, shown again as the start of this one
            self.transcript.append_token(self._continuing.content)
        self._update_buttons()
        self.generation_started.emit()

    def stop(self) -> None:
        if self._preparing:
            self._drop_preparation()
        elif self.generating:
            self.bridge.cancel()
        elif self._editing is not None:  # Esc also leaves an edit
            self._editing = None
            self.input.clear()
            self._update_buttons()

    def keep_answer_on_quit(self) -> None:
        """The window is closing mid-answer: save what has arrived, marked stopped, before the engine goes.

        Waiting for the engine's own Done would hold the closing window for as long as the engine takes to
        notice; the tokens shown are the answer the user saw."""
        if self._preparing:  # nothing was asked yet: nothing to keep
            self._drop_preparation()
        if not self.generating:
            return
        self.bridge.cancel()
        text = "" if self._detached else self._streamed()
        self._finish(text, {"finish_reason": "cancelled", "stopped_by": "quit"})

    def _streamed(self) -> str:
        """What the answer in progress has shown of its own (without the answer it continues)."""
        return self.transcript.stream_text()[len(self._continuing.content) if self._continuing is not None else 0:]

    def continue_answer(self, answer_id: int | None = None) -> None:
        """Go on with the conversation's last answer (cut off by the length limit, or stopped) from where it
        stopped: the model is asked with that answer as the start of its reply, and what it adds joins it."""
        if self.generating or not self.bridge.ready or self.refusal or self.conversation_id is None:
            return
        msgs = self.store.messages(self.conversation_id)
        last = msgs[-1] if msgs else None
        if last is None or last.role != "assistant" or not last.content or answer_id not in (None, last.id):
            return
        self._continuing = last
        self._render_conversation(before=last.id)
        self._ask()

    def regenerate(self, answer_id: int | None = None) -> None:
        """Ask again for an answer: `answer_id` (any answer, from its header), else the last question's.
        The old answer and whatever followed it stay as its previous version (a branch to page back to)."""
        if self.generating or not self.bridge.ready or self.refusal or self.conversation_id is None:
            return
        msgs = self.store.messages(self.conversation_id)
        if answer_id is not None:
            answer = next((m for m in msgs if m.id == answer_id and m.role == "assistant"), None)
            if answer is None:
                return
        else:
            users = [i for i, m in enumerate(msgs) if m.role == "user"]
            if not users:
                return
            following = msgs[users[-1] + 1:]
            answer = following[0] if following and following[0].role == "assistant" else None
        if answer is not None and not answer.content and answer.meta.get("error") and answer.id == msgs[-1].id:
            # The last answer failed before its first token: nothing to keep, ask again in its place.
            self.store.truncate_from(self.conversation_id, answer.id)
            answer = None
        self._regenerating = answer.id if answer is not None else None
        self._render_conversation(before=self._regenerating)
        self._ask(answer.content if answer is not None else "")

    def edit_last(self) -> None:
        if self.generating or self.conversation_id is None:
            return
        users = [m for m in self.store.messages(self.conversation_id) if m.role == "user"]
        if users:
            self.edit_message(users[-1].id)

    def edit_message(self, message_id: int) -> None:
        """Put a question back in the box; sending it asks again from there (the old version is kept)."""
        msg = self.store.message(message_id)
        if self.generating or msg is None or msg.role != "user":
            return
        self._editing = message_id
        self.input.setPlainText(msg.content)
        self.input.setFocus()
        self._update_buttons()

    # --- answers ------------------------------------------------------------
    def _save_answer(self) -> None:
        if self._answer is not None and not self._detached:
            self._answer.update(self._streamed(), force=True)  # the timer is the cadence

    def _on_token_received(self, text: str) -> None:
        if self._reading:
            self._on_answer_started()
        if self.generating and not self._detached:
            self.transcript.append_token(text)

    def _on_prompt_progress(self, done: int, total: int) -> None:
        """A long prompt is being read (the engine says after each batch): said under the transcript."""
        if self.generating and total:
            self._reading = f"Reading the prompt: {done:,} of {total:,} tokens ({100 * done / total:.0f}%)…"
            self._update_buttons()

    def _on_answer_started(self, *_args) -> None:
        if self._reading:  # the prompt is read: the answer's figures follow
            self._reading = ""
            self._update_buttons()

    @staticmethod
    def _note(meta: dict) -> str:
        # Which model wrote it, and where, first: the rest is how it went.
        signed = [meta["model"] + (f" on {meta['endpoint']}" if meta.get("endpoint") else "")] \
            if meta.get("model") else []
        signed = [chip_text(a) for a in meta.get(ATTACHMENTS) or []] + signed  # a question's files, as chips
        if meta.get("partial"):
            return " · ".join([*signed, "partial answer: cut off by an error"])
        # A server that sends no token counts (llama-cpp-python's) still streamed its chunks: count those.
        count = f"{meta['completion_tokens']} tokens" if meta.get("completion_tokens") else (
            f"{meta['stream_chunks']} chunks" if meta.get("stream_chunks") else "")
        parts = [*signed, *([count, f"{meta.get('gen_tok_s') or 0:.1f} tok/s"] if count else [])]
        if meta.get("finish_reason") == "cancelled":
            parts.append("stopped when Hearth was closed" if meta.get("stopped_by") == "quit" else "stopped")
        elif meta.get("finish_reason") == INTERRUPTED:  # saved while it streamed; the window died before its end
            parts.append("interrupted: Hearth closed before the answer ended")
        elif meta.get("finish_reason") == "length":
            parts.append("hit the length limit")
        if (meta.get("prediction") or {}).get("accepted"):  # regenerated or edited: drafted from the old answer
            parts.append(f"{meta['prediction']['accepted']} tokens as before")
        if meta.get("prompt_dropped"):  # never silently: part of the conversation was out of the model's view
            parts.append(f"the chat is longer than the context: {meta['prompt_dropped']:,} earlier tokens were "
                         "not seen")
        return " · ".join(parts)

    def _finish(self, text: str, meta: dict) -> None:
        """text: what this answer added (a continued one's earlier text is not in it)."""
        self._reading = ""
        self._show_approval(None)
        # The tokens still waiting for the next frame are rendered first: the thinking's end may be among them,
        # and its time is read here (end_stream drops what is pending and renders the whole text at once).
        self.transcript.flush()
        if self.transcript.stream_thought_s is not None and not self._detached:
            meta = {**meta, "thought_s": round(self.transcript.stream_thought_s, 1)}
        if self._answer_sources:  # which chunks the answer was given: file, page or heading, span, and text
            meta["sources"] = [{**src.as_dict(), "text": src.hit.text} for src in self._answer_sources]
            self._answer_sources = []
        conversation = self._gen_conversation
        regenerating, self._regenerating = self._regenerating, None
        self._continuing = None
        self._gen_conversation = None
        self._save_timer.stop()
        answer, self._answer = self._answer, None
        # Saved as its draft says (a new message, a version, a continued text), signed with the model that wrote it.
        saved = answer.finish(text, meta) if answer is not None else None
        meta = saved.meta if saved is not None else {**self._answer_model, **meta}
        if self._detached:
            self._detached = False
        elif regenerating is not None and not text and not meta.get("tool_calls") and saved is not None:
            self.transcript.end_stream()
            self._render_conversation()  # the answer kept is shown again
        else:
            self.transcript.end_stream(self._note(meta), self._links(saved, True) if saved is not None else None)
        if saved is not None:
            if conversation == self.conversation_id and answer_model(saved.meta):
                self.remembered = answer_model(saved.meta)
                self._update_model_banner()
            self.answer_saved.emit(saved.id)
        self._update_buttons()

    # --- tool calls -----------------------------------------------------------
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
        import html
        import json

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
        self.bridge.answer_tool_call(decision)

    def _on_generation_finished(self, done: dict) -> None:
        if not self.generating:
            return
        meta = {k: done[k] for k in ("finish_reason", "completion_tokens", "gen_tok_s", "ttft_s", "prompt_tok_s",
                                     "stream_chunks", "prompt_dropped", "prediction", "tool_calls") if k in done}
        spec = done.get("spec") or {}
        if (spec.get("drafter") == "prediction" and spec.get("drafted") and (done.get("completion_tokens") or 0)
                >= JUDGED_TOKENS and (spec.get("speedup") or 1.0) < 1.0):
            self.answer_drafts_cost_speed.emit(float(spec["speedup"]))
        if done.get("tool_notice"):  # the CLI's words name its flag; the window's limit is in Sampling
            self.tools_problem.emit("The model's tool call was cut off by the answer's token limit (Sampling: "
                                    "max tokens) before it was complete, so it was not run and is shown as text.")
        self._finish(done.get("text", ""), meta)

    def _on_generation_failed(self, message: str) -> None:
        if not self.generating:
            return
        shown = not self._detached
        # The backend's partial answer (a remote's stream cut mid-answer) is what arrived; the
        # transcript's is what was shown, which is the same unless the user switched away.
        text = self.bridge.failed_text or (self._streamed() if shown else "")
        self._failed = True
        self._finish(text, {"error": message, "finish_reason": "error", **({"partial": True} if text else {})})
        if shown:
            self.transcript.append_message("error", message)
