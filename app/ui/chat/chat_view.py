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

from PySide6.QtCore import QSignalBlocker, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMessageBox, QPlainTextEdit, QSizePolicy, QSplitter, QWidget

from app.ui.widgets.notices import ERROR, INFO, WARNING, Notice
from app.core.chats.answer_saving import SAVE_INTERVAL_S, recover_interrupted
from app.core.chats.store import DEFAULT_TITLE, MEDIA, ChatStore, ChatStoreError, remembered_model, title_from
from app.core.chats.reasoning import without_reasoning
from app.docs.conversation import KEY as ATTACHMENTS
from app.docs.conversation import ConversationDocs
from app.ui.chat.asking import Asking
from app.ui.chat.conversation_list import ConversationList
from app.ui.chat.message_notes import answer_note, message_links
from app.ui.chat.model_picker import ModelPicker
from app.ui.chat.prompt_edit import PromptEdit
from app.ui.chat.prompt_presets import PromptPresets
from app.ui.chat.length_check import LengthCheck
from app.ui.chat.media_turns import MediaTurns, message_media
from app.ui.chat.sampling_panel import SamplingPanel
from app.ui.widgets.clamped_spin import say_clamps
from app.ui.chat.tool_approval import ToolApproval
from app.ui.chat.tools_panel import ToolsPanel
from app.ui.chat.transcript import Transcript
from app.ui.chat.welcome import welcome
from app.ui.docs.attach_bar import AttachBar, FileDrops
from app.ui.docs.collections_panel import CollectionsPanel
from app.ui.bridge.engine_bridge import EngineBridge
from app.ui.models.titles import model_title
from app.ui.models.titles import path_title
from app.ui.widgets import STRETCH, VerticalScroll, button, group, hbox, vbox, wrapped
from app.ui.bridge.worker import Tasks

WAITING_TURN = ("Waiting its turn: the engine is answering API requests first (Server page); this answer starts "
                "after them.")


class ChatView(Asking, MediaTurns, ToolApproval, QWidget):
    generation_started = Signal()
    answer_saved = Signal(int)  # message id
    # (StreamingAnswer, its saved Message or None): an end the store could not take at once, saved later on the
    # answer's own thread; queued to the GUI thread.
    _answer_saved_later = Signal(object, object)
    conversation_changed = Signal()  # another conversation (or a new one) is open
    model_load_requested = Signal(str)  # the remembered model's path: the chat's "Load it"
    noticed = Signal(object)  # a Notice (app.ui.widgets.notices) for the window's status bar
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
        self._answer = None  # the answer in progress (a StreamingAnswer), as the store keeps it while it streams
        self._save_timer = QTimer(self, interval=int(SAVE_INTERVAL_S * 1000), timeout=self._save_answer)
        self._saving_later: list = []
        self._drafts: dict[int | None, str] = {}  # unsent text by chat (None: the new chat), kept while switching  # answers whose end waits for the store (a lock, a full disk)
        self._answer_saved_later.connect(self._on_answer_saved_later)
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
        self._build_approval()  # app/ui/chat/tool_approval.py

        self.conversations = ConversationList(store)
        self.picker = ModelPicker()
        self.transcript = Transcript()
        self.transcript.setAccessibleName("Conversation")
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setAccessibleName("System prompt")
        self.system_prompt.setPlaceholderText("System prompt (optional): how the assistant should behave")
        self.system_prompt.setFixedHeight(52)
        self.system_prompt.setTabChangesFocus(True)  # a keyboard-only user moves on with Tab (#49.12)
        self.input = PromptEdit()
        self.input.setAccessibleName("Message")
        self.input.set_enter_sends(True)
        self.input.setFixedHeight(84)
        self.send_button = button("Send", self.send, "Send (Enter, or Ctrl+Enter)")
        self.stop_button = button("Stop", self.stop, "Stop the answer (Esc)")
        self.regen_button = button("Regenerate", lambda: self.regenerate(),  # not clicked(False) as the answer id
                                   "Ask for another last answer; the earlier ones stay (page with ‹ ›). "
                                   "Every answer has Regenerate in its header")
        self.edit_button = button("Edit last", self.edit_last,
                                  "Put your last message back in the box; the old one stays as a version "
                                  "(every message has Edit in its header)")
        # A long hint (editing a message) must not widen the window past the screen.
        self.hint = wrapped(name="chatHint")
        self.sampling = SamplingPanel()
        self.prompt_presets = PromptPresets()
        # The conversation's own model, when another one answers now: said above the transcript, with Load.
        self.model_banner = QWidget()
        self.model_banner.setObjectName("modelBanner")
        self.model_note = wrapped(name="hint")  # a long model name or path must not widen the page
        self.model_load_button = button("Load it", self._on_load_remembered)
        hbox((self.model_note, 1), self.model_load_button, parent=self.model_banner, margin=0)
        self.model_banner.hide()

        # A message longer than the context leaves room for, said before sending.
        self.too_long = wrapped(color="#d97706")
        center = QWidget()
        vbox(self.picker, self.system_prompt, self.model_banner, (self.transcript, 1), self.approval, self.hint,
               self.attach_bar, self.input, self.too_long,
               hbox(self.edit_button, self.regen_button, STRETCH, self.stop_button, self.send_button),
               parent=center, margin=0)

        prompts = group("System prompt", self.prompt_presets)
        sampling = group("Sampling", self.sampling)
        documents = group("Documents", self.collections_panel)
        tools = group("Tools", self.tools_panel)
        self._full_only = (self.system_prompt, prompts, documents, tools)  # what the simple window leaves out
        self._sampling_box = sampling
        for box in (prompts, sampling, documents, tools):
            # Each box keeps the height its controls need; where the page is shorter, the column scrolls (at
            # 1024x600 the sampling boxes were crushed to half a line, their numbers cut through, #49.16).
            box.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Minimum)
        side = QWidget()
        vbox(prompts, sampling, documents, tools, STRETCH, parent=side, margin=0)
        self.side_scroll = VerticalScroll(side, name="Chat settings", flat=True)

        splitter = QSplitter()
        splitter.addWidget(self.conversations)
        splitter.addWidget(center)
        splitter.addWidget(self.side_scroll)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([200, 800, 220])  # the conversation gets the room a narrow screen has
        hbox(splitter, parent=self, margin=6)

        say_clamps(self, self.noticed)  # a typed value out of range, clamped: said on the status bar too
        self.length_check = LengthCheck(self, self.too_long)
        self.input.submitted.connect(self.send)
        self.transcript.action_requested.connect(self._on_message_action)
        self.transcript.example_chosen.connect(self._on_example_chosen)
        self.transcript.source_requested.connect(self.show_source)
        self.attach_bar.problem.connect(lambda sentence: self.noticed.emit(Notice(sentence, ERROR, "chat.attach")))
        self.file_drops = FileDrops(self.attach_bar, [self.transcript.viewport(), self.input.viewport()])
        self._wire_media()
        self.conversations.conversation_chosen.connect(self.open_conversation)
        self.conversations.new_requested.connect(self.new_conversation)
        self.conversations.conversation_deleted.connect(self._on_conversation_deleted)
        self.conversations.noticed.connect(self.noticed)
        self.system_prompt.textChanged.connect(self._on_system_prompt_changed)
        self.prompt_presets.chosen.connect(self.system_prompt.setPlainText)
        bridge.token_received.connect(self._on_token_received)
        bridge.turn_started.connect(self._update_buttons)
        bridge.prompt_progress.connect(self._on_prompt_progress)
        bridge.stats_received.connect(self._on_answer_started)
        bridge.generation_finished.connect(self._on_generation_finished)
        bridge.generation_failed.connect(self._on_generation_failed)
        bridge.engine_crashed.connect(self._on_generation_failed)
        # The settings the user has not set show the loaded model's own recommendation (general.sampling.*).
        bridge.model_loaded.connect(lambda *_: self.sampling.show_recommended(
            (self.bridge.info or {}).get("recommended_sampling") or {}))
        for signal in (bridge.model_loaded, bridge.model_loading, bridge.load_failed, bridge.backend_changed,
                       bridge.model_unloaded):
            signal.connect(self._update_buttons)
            signal.connect(self._update_model_banner)
        for signal in (bridge.model_loaded, bridge.model_unloaded, bridge.backend_changed):
            signal.connect(self._welcome_if_empty)

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
        self.input.setPlainText(self._drafts.pop(None, ""))
        self.transcript.clear_all()
        with QSignalBlocker(self.system_prompt):
            self.system_prompt.setPlainText("")
        self.prompt_presets.show_text("")
        self.conversations.list.clearSelection()
        self.conversations.list.setCurrentItem(None)
        self.input.setFocus()
        self._welcome_if_empty()
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
        self.input.setPlainText(self._drafts.pop(conversation_id, ""))
        self._failed = False
        with QSignalBlocker(self.system_prompt):
            self.system_prompt.setPlainText(conv.system_prompt)
        self.prompt_presets.show_text(conv.system_prompt)
        self.collections_panel.show_conversation(conversation_id)
        self.tools_panel.show_conversation(conversation_id)
        self._render_conversation()
        self._update_model_banner()
        self._update_buttons()
        self.conversation_changed.emit()

    def _render_conversation(self, before: int | None = None, keep_view: bool = False) -> None:
        """Show the open conversation; before: only the messages before this one (the answer being
        regenerated: its new version streams after them, and what followed it waits in the store)."""
        shown: list[tuple] = []
        msgs = self.store.messages(self.conversation_id)
        self.remembered = remembered_model(msgs)
        for msg in msgs:
            if before is not None and msg.id >= before:
                break
            shown.append((msg.role, msg.content, self._note(msg.meta), self._links(msg, msg is msgs[-1]),
                          msg.meta.get("thought_s"), msg.meta.get("tool_calls") or None, message_media(msg.meta)))
            if msg.meta.get("error"):
                shown.append(("error", msg.meta["error"], ""))
        if not shown and before is None:
            self._welcome_if_empty()
            return
        self.transcript.show_messages(shown, keep_view)

    def _welcome_if_empty(self, *_args) -> None:
        """An empty chat says what to do, with example prompts for the loaded model (app/ui/chat/welcome.py)."""
        if self.generating or self.transcript.loading or self.transcript.streaming:
            return
        if self.conversation_id is not None and self.store.has_message(self.conversation_id, "user"):
            return
        info = self.bridge.info if self.bridge.ready else None
        title = self.model_title(info["path"]) if info and info.get("path") and not self.bridge.remote else ""
        self.transcript.show_welcome(welcome(info, title))

    def _on_example_chosen(self, text: str) -> None:
        self.input.setPlainText(text)
        self.input.setFocus()

    def set_simple(self, simple: bool) -> None:
        """The simple window (app/ui/shell/window_mode.py): the chats, the conversation, the message box, the model
        picker and Attach, with sampling as one preset; the full one: every box."""
        for widget in self._full_only:
            widget.setVisible(not simple)
        self.sampling.set_simple(simple)
        self._sampling_box.setTitle("Answers" if simple else "Sampling")
        self.picker.simple = simple
        self.picker.show_tools_badge(self.bridge.info if self.bridge.ready else None)

    _note = staticmethod(answer_note)
    _links = staticmethod(message_links)

    def _on_message_action(self, action: str, message_id: int) -> None:
        msg = self.store.message(message_id)
        if msg is None:
            return
        if action == "copy":  # an answer without its thinking, as it is shown
            text = without_reasoning(msg.content) if msg.role == "assistant" else msg.content
            QGuiApplication.clipboard().setText(text)
            self.transcript.message_copied.emit(text)
        elif action in ("edit", "regenerate", "continue"):
            asks = {"edit": self.edit_message, "regenerate": self.regenerate, "continue": self.continue_answer}
            asks[action](message_id)
        elif action in ("prev", "next") and not self.generating:
            try:
                self.store.show_version(message_id, msg.version + (1 if action == "next" else -1))
            except ChatStoreError as exc:
                self.noticed.emit(Notice(f"That version cannot be shown now: {exc}", ERROR, "chat.saving"))
                return
            self._editing = None
            self._render_conversation(keep_view=True)
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
        # What the user typed and has not sent belongs to this chat: kept for it, never sent in another (#55 B1).
        # An edit in progress is not a draft: leaving ends it.
        text = self.input.toPlainText()
        if self._editing is None and text.strip():
            self._drafts[self.conversation_id] = text
        if self._preparing:
            self._drop_preparation()
        elif self.generating and not self._detached:
            self._save_answer()  # what was shown is kept until the engine's Done brings the whole answer
            self._save_timer.stop()
            self._detached = True
            self.transcript.end_stream()
            self.bridge.cancel()
            # Said at the moment of leaving: the answer stopped without a word before (#49.13).
            conv = self.store.get(self.conversation_id) if self.conversation_id is not None else None
            title = f"“{conv.title}”" if conv is not None else "the chat you left"
            self.noticed.emit(Notice(f"The answer in {title} stopped when you left that chat; what it wrote is kept, "
                                     "and Continue there goes on from it.", INFO, "chat.left"))

    def _on_conversation_deleted(self, conversation_id: int) -> None:
        if conversation_id == self.conversation_id:
            self.conversation_id = None
            self.new_conversation()

    def _on_system_prompt_changed(self) -> None:
        self.prompt_presets.show_text(self.system_prompt.toPlainText())
        if self.conversation_id is not None:
            try:
                self.store.set_system_prompt(self.conversation_id, self.system_prompt.toPlainText())
            except ChatStoreError as exc:  # busy or full: the text stays in the box; the next change saves it
                self.noticed.emit(Notice(f"The system prompt was not saved yet: {exc}", WARNING, "chat.saving"))

    # --- sending ------------------------------------------------------------
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not (text or self.attach_bar.media) or self.generating or not self.bridge.ready or self.refusal \
                or self._still_saving() or self._refuse_pending_media():
            return
        try:
            prediction = self._keep_question(text)
        except ChatStoreError as exc:  # busy or full: the question stays in the box, nothing was sent
            self.noticed.emit(Notice(f"{exc} Your message was not sent; it is still in the box.", ERROR,
                                     "chat.saving"))
            return
        self.input.clear()
        self._ask(prediction)

    def _keep_question(self, text: str) -> str:
        """The question into the store (a new chat, a message, or an edited one's new version); returns the
        prediction the answer may draft from (an edited question's old answer)."""
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
            edited = self.store.message(self._editing)
            kept = (edited.meta.get(ATTACHMENTS) or []) if edited else []
            meta = self._attachments_meta(text, kept, self._editing)
            media = self._keep_media((edited.meta.get(MEDIA) or []) if edited else [])  # its images stay too
            if media:
                meta[MEDIA] = media
            self.store.add_version(self._editing, text, meta)
            self._editing = None
            self._render_conversation()
        else:
            meta = self._attachments_meta(text)
            media = self._keep_media()
            if media:
                meta[MEDIA] = media
            asked = self.store.message(self.store.add_message(self.conversation_id, "user", text, meta))
            self.transcript.append_message("user", text, self._note(asked.meta), links=self._links(asked),
                                           media=message_media(asked.meta))  # Copy and Edit at once
        return prediction

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
        self.length_check.close()
        self.docs.close()

    def _answer_after(self, question_id: int) -> str:
        msgs = self.store.messages(self.conversation_id)
        at = next((i for i, m in enumerate(msgs) if m.id == question_id), None)
        following = msgs[at + 1] if at is not None and at + 1 < len(msgs) else None
        return following.content if following is not None and following.role == "assistant" else ""

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
