"""The chat page's answer in progress, from the question to the saved answer: its prompt (app/core/chats/prompt.py,
the terminal's too), the documents' passages found on a worker first, the request, the tokens as they stream,
the saving while it streams (app/core/chats/answer_saving.py), and its end: done, stopped, failed or cut by a crash.
Regenerate and Continue ask here too. A mixin of ChatView (app/ui/chat/chat_view.py), whose state it shares."""

from __future__ import annotations

import time

from app.ui.widgets.notices import INFO, UNTIL_CLEARED, WARNING, Notice
from app.core.chats.answer_saving import StreamingAnswer
from app.core.chats.prompt import chat_messages
from app.core.chats.store import answer_model
from app.docs.conversation import KEY as ATTACHMENTS

# An answer drafted from the old one is judged on its speed only from this length on: a few tokens' speed is noise.
JUDGED_TOKENS = 32


class Asking:
    def _ask(self, prediction: str = "") -> None:
        """Ask for the next answer; `prediction`, the answer it replaces, lets the engine draft from it
        (predicted outputs: the same answer, sooner)."""
        self._failed = False
        self._reading = ""
        # The answer being regenerated stays in the store (as a version) until the new one replaces it, but it
        # is not part of what the model is asked.
        before = self._regenerating
        continued = self._continuing.id if self._continuing is not None else None
        stored = [m for m in self.store.messages(self.conversation_id)
                  if m.role in ("user", "assistant") and (before is None or m.id < before)]
        turns = [{"role": m.role, "content": m.content, "meta": m.meta, "id": m.id} for m in stored]
        system = self.system_prompt.toPlainText()
        sampling = self.sampling.options()
        sampling.prediction = prediction if self.reuse_answer_drafts else ""
        for key, value in self.sampling_overrides.items():
            setattr(sampling, key, value)
        collections = self.collections_panel.chosen()
        if collections or any(a.get("mode") == "retrieval" for m in stored for a in m.meta.get(ATTACHMENTS) or []):
            # The question's passages on a worker (its embedding runs in the embedding engine); the answer is
            # asked when they are found (_send).
            model, n_ctx = self._model_path(), int((self.bridge.info or {}).get("n_ctx") or 4096)
            override = self.collections_panel.budget_override()
            self._preparing = True
            self._prep_id += 1
            token = self._prep_id
            self._update_buttons()
            self.doc_tasks.run(lambda: self.docs.passages(turns, collections, model, n_ctx, override),
                               lambda found: self._send(chat_messages(system, turns, continued, found[0],
                                                                      self.media_part_of), sampling,
                                                        found[1], found[2], token),
                               lambda message: self._on_docs_failed(message, token), name="docs-prompt")
            return
        # The one prompt builder the terminal's `hearth chat` uses too (app/core/chats/prompt.py).
        self._send(chat_messages(system, turns, continued, media_of=self.media_part_of), sampling)

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
            self.noticed.emit(Notice(sentence, WARNING, "chat.documents"))
        self._answer_sources = list(sources or [])
        self._answer_model = self.current_model()
        servers = self.tools_panel.chosen()
        if servers:
            sampling.prediction = ""  # the old answer's tokens cannot draft a call the grammar writes
            choice = self.tool_overrides.get("choice", self.tools_panel.tool_choice())
            info = self.bridge.info if self.bridge.ready else None
            if choice == "auto" and info and not info.get("knows_tools") and not self.bridge.remote:
                # Said in the chat, not left to a made-up call written as text (#55 E1).
                self.noticed.emit(Notice(f"{self._answer_model.get('model') or 'This model'} was not trained for "
                                         "tools: it may write a call as text instead of making one. Tools box: "
                                         "'Always call a tool' makes it call one.", WARNING, "chat.tools"))
            asked = self.bridge.chat_with_tools(messages, sampling, servers, choice,
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
        # Saved while it streams (app/core/chats/answer_saving.py): a crash of the window costs at most the last second.
        self._answer = StreamingAnswer(self.store, self.conversation_id, self._answer_model,
                                       regenerating=self._regenerating, continuing=self._continuing)
        answer = self._answer
        answer.on_saved = lambda saved: self._answer_saved_later.emit(answer, saved)  # from the answer's thread
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
        if (self.generating or not self.bridge.ready or self.refusal or self.conversation_id is None
                or self._still_saving()):
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
        if (self.generating or not self.bridge.ready or self.refusal or self.conversation_id is None
                or self._still_saving()):
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
        # Never waited for: a store another program holds, or a full disk, saves it later (_on_answer_saved_later).
        saved = answer.finish(text, meta) if answer is not None else None
        if answer is not None and answer.saving_later:
            self._saving_later.append(answer)
            self.noticed.emit(Notice(f"{answer.problem} The answer is kept and will be saved as soon as the chat "
                                     "history can be written.", WARNING, "chat.saving", UNTIL_CLEARED))
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

    def _on_answer_saved_later(self, answer: StreamingAnswer, saved) -> None:
        """An answer's end that the store could not take at once was saved (on the answer's own thread)."""
        if answer in self._saving_later:
            self._saving_later.remove(answer)
        if not self._saving_later:
            self.noticed.emit(Notice("The chat history can be written again: the answer was saved.", INFO,
                                     "chat.saving"))
        if saved is None:
            return
        if answer.conversation_id == self.conversation_id and not self.generating:
            self._render_conversation()  # the answer as saved, with its links (Copy, Regenerate, versions)
        self.answer_saved.emit(saved.id)

    def _still_saving(self) -> bool:
        """A question asked before the last answer is saved would land before it: said, and nothing is asked."""
        if not self._saving_later:
            return False
        problem = self._saving_later[-1].problem or "The chat history is busy."
        self.noticed.emit(Notice(f"The last answer is still being saved ({problem.rstrip('.')}); try again in a "
                                 "moment. What you typed stays in the box.", WARNING, "chat.saving"))
        return True

    def wait_saved(self, timeout: float) -> bool:
        """The window is closing: give the answers saved later up to timeout seconds in all."""
        deadline = time.monotonic() + timeout
        return all(a.wait_saved(max(0.0, deadline - time.monotonic())) for a in list(self._saving_later))

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
            self.noticed.emit(Notice("The model's tool call was cut off by the answer's token limit (Sampling: "
                                     "max tokens) before it was complete, so it was not run and is shown as text.",
                                     WARNING, "chat.tools"))
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
