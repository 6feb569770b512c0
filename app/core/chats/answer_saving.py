"""An answer is saved while it streams, so a crash of the window (kill -9, the OOM killer, a power cut) costs at
most the last second of it. The one place that does it, for every client that keeps a chat history (the window;
`hearth chat` keeps none).

The answer in progress is a row of its own in the chat store (answer_drafts, app/core/chats/store.py) that names what
it becomes when it ends: a new message after the question, a new version of a regenerated answer, or the
continued text of an answer. Saving it is one UPDATE of that row, in one small transaction, at most every
SAVE_INTERVAL_S and only when the text grew: the per-token path does nothing. When the answer ends, `finish`
saves it as its draft says and drops the draft in the same transaction.

A draft whose owner is gone (its process died) is an answer that was interrupted: `recover_interrupted`, at the
next start of the window, saves it where it belongs, marked interrupted, so the chat shows it with Continue, as
it shows a stopped one. The owner is the process id and its start time (app/core/store/process_owner.py, as the
API's stored responses have it), so a reused process id is not mistaken
for the window that wrote the draft.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from app.core.chats.store import ChatStore, ChatStoreError, Message
from app.core.store.process_owner import owner_alive, owner_of

# Twice a second: a crash loses at most this much (plus the engine's 80 ms token merging), under the one second
# the promise allows. One UPDATE of one row costs about a millisecond (tests/core/chats/test_answer_saving.py).
SAVE_INTERVAL_S = 0.5
# An end that could not be saved is tried again after this, then twice as long each time, up to RETRY_MOST_S.
RETRY_FIRST_S = 0.25
RETRY_MOST_S = 2.0
INTERRUPTED = "interrupted"  # an answer's finish_reason when the window died while it streamed

_live: set[tuple[str, int]] = set()  # (store path, draft id) of this process's answers in progress


class StreamingAnswer:
    """One answer of one conversation, from its first token to its end.

    continuing: the answer (a Message) this one goes on with: what is saved is its text followed by this one's,
    with its figures. regenerating: the id of the answer this one becomes a new version of.

    No write may hold its caller (the window's GUI thread) while another program holds the store's lock or the
    disk is full: a draft save that fails is tried again at the next save, and an end that cannot be saved at
    once is saved on a thread of its own (`saving_later`), retried until the store takes it, and told to
    on_saved(message) from that thread. Until then the answer lives in this object: nothing shown is lost."""

    def __init__(self, store: ChatStore, conversation_id: int, meta: dict, regenerating: int | None = None,
                 continuing: Message | None = None, interval_s: float = SAVE_INTERVAL_S, clock=time.monotonic,
                 on_saved: Callable[[Message | None], None] | None = None):
        self.store = store
        self.conversation_id = conversation_id
        self.continuing = continuing
        self.base_meta = dict(meta)
        self.interval_s = interval_s
        self.clock = clock
        self.on_saved = on_saved
        self.saves = 0  # counted for tests
        self.problem: str | None = None  # the last write that failed (a busy or full store), said by the window
        self.saving_later = False  # the end is being saved on a thread of its own (finish could not save it)
        self._saved_later = threading.Event()
        self._kind, self._target = ("continue", continuing.id) if continuing is not None else (
            ("version", regenerating) if regenerating is not None else ("new", None))
        self._saved_text = ""
        self._last = clock()
        self.draft_id: int | None = None
        try:
            self._begin(self.store, "")
        except ChatStoreError as exc:  # busy or full: the first save that can begins the draft
            self.problem = str(exc)

    def _begin(self, store: ChatStore, text: str) -> None:
        self.draft_id = store.begin_draft(self.conversation_id, self._kind, self._target, self._content(text),
                                          {**self._meta(self.base_meta), "finish_reason": INTERRUPTED}, owner_of())
        _live.add((str(self.store.path), self.draft_id))

    def _content(self, text: str) -> str:
        return (self.continuing.content if self.continuing is not None else "") + text

    def _meta(self, meta: dict) -> dict:
        if self.continuing is None:
            return meta
        old = self.continuing.meta
        tokens = (old.get("completion_tokens") or 0) + (meta.get("completion_tokens") or 0)
        # The earlier part's thinking time stands: the continuation would time a thinking it only finished.
        return {**old, **meta, **({"completion_tokens": tokens} if tokens else {}),
                **({"thought_s": old["thought_s"]} if "thought_s" in old else {}), "continued": True}

    def update(self, text: str, force: bool = False) -> bool:
        """The answer's own text so far; saved when SAVE_INTERVAL_S has passed since the last save (or force) and
        it changed. True when it was written."""
        now = self.clock()
        if text == self._saved_text or (not force and now - self._last < self.interval_s):
            return False
        try:
            if self.draft_id is None:
                self._begin(self.store, text)
            else:
                self.store.save_draft(self.draft_id, self._content(text))
        except ChatStoreError as exc:  # busy or full: the answer goes on, the next save tries again
            self.problem = str(exc)
            return False
        self.problem = None
        self._saved_text, self._last = text, now
        self.saves += 1
        return True

    def finish(self, text: str, meta: dict) -> Message | None:
        """The answer ended (done, stopped, failed): saved whole, as its draft says. The saved message, or None:
        nothing to save (its chat was deleted, no text), or `saving_later` when the store could not take it now."""
        content, meta = self._content(text), {**self.base_meta, **self._meta(meta)}
        try:
            return self._commit(self.store, content, meta)
        except ChatStoreError as exc:
            self.problem = str(exc)
        self.saving_later = True
        if self.store.in_memory:  # no other connection reaches it, and a store in memory is never busy
            return None
        threading.Thread(target=self._save_later, args=(content, meta), name="answer-saving", daemon=True).start()
        return None

    def _commit(self, store: ChatStore, content: str, meta: dict) -> Message | None:
        if self.draft_id is None:  # not one save succeeded: the draft begins whole, then becomes the answer
            self._begin(store, content[len(self._content("")):])
        saved = store.commit_draft(self.draft_id, content, meta)
        _live.discard((str(self.store.path), self.draft_id))
        return saved

    def _save_later(self, content: str, meta: dict) -> None:
        """On a thread of its own, with a connection of its own: tried until the store takes it (the lock goes,
        space is freed). The process may end first; then the draft, as last saved, is what the next start finds."""
        delay, store = RETRY_FIRST_S, None
        while True:
            try:
                store = store or self.store.sibling()
                saved = self._commit(store, content, meta)
                break
            except ChatStoreError as exc:
                self.problem = str(exc)
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MOST_S)
        store.close()
        self.problem = None
        self._saved_later.set()
        if self.on_saved is not None:
            self.on_saved(saved)

    def wait_saved(self, timeout: float) -> bool:
        """Whether an end being saved later was saved within timeout seconds (True when nothing waits)."""
        return not self.saving_later or self._saved_later.wait(timeout)


def recover_interrupted(store: ChatStore) -> list[int]:
    """Save the answers whose window died while they streamed, marked interrupted; the conversations they are
    in. A draft of a live process (another Hearth's answer in progress) is left alone."""
    found = []
    for draft in store.drafts():
        if (str(store.path), draft["id"]) in _live or (draft["owner"] != owner_of() and owner_alive(draft["owner"])):
            continue
        meta = {**draft["meta"], "finish_reason": INTERRUPTED}
        if store.commit_draft(draft["id"], draft["content"], meta) is not None:
            found.append(draft["conversation_id"])
    return found
