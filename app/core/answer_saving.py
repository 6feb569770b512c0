"""An answer is saved while it streams, so a crash of the window (kill -9, the OOM killer, a power cut) costs at
most the last second of it. The one place that does it, for every client that keeps a chat history (the window;
`hearth chat` keeps none).

The answer in progress is a row of its own in the chat store (answer_drafts, app/core/chats.py) that names what
it becomes when it ends: a new message after the question, a new version of a regenerated answer, or the
continued text of an answer. Saving it is one UPDATE of that row, in one small transaction, at most every
SAVE_INTERVAL_S and only when the text grew: the per-token path does nothing. When the answer ends, `finish`
saves it as its draft says and drops the draft in the same transaction.

A draft whose owner is gone (its process died) is an answer that was interrupted: `recover_interrupted`, at the
next start of the window, saves it where it belongs, marked interrupted, so the chat shows it with Continue, as
it shows a stopped one. The owner is the process id and its start time, so a reused process id is not mistaken
for the window that wrote the draft.
"""

from __future__ import annotations

import os
import time

import psutil

from app.core.chats import ChatStore, ChatStoreError, Message

# Twice a second: a crash loses at most this much (plus the engine's 80 ms token merging), under the one second
# the promise allows. One UPDATE of one row costs about a millisecond (tests/core/test_answer_saving.py).
SAVE_INTERVAL_S = 0.5
INTERRUPTED = "interrupted"  # an answer's finish_reason when the window died while it streamed

_live: set[tuple[str, int]] = set()  # (store path, draft id) of this process's answers in progress


def _owner(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        return f"{pid}:?"
    return f"{pid}:{started:.2f}"


def _owner_alive(owner: str) -> bool:
    pid, _, _started = owner.partition(":")
    try:
        return pid.isdigit() and _owner(int(pid)) == owner
    except psutil.Error:
        return False


class StreamingAnswer:
    """One answer of one conversation, from its first token to its end.

    continuing: the answer (a Message) this one goes on with: what is saved is its text followed by this one's,
    with its figures. regenerating: the id of the answer this one becomes a new version of."""

    def __init__(self, store: ChatStore, conversation_id: int, meta: dict, regenerating: int | None = None,
                 continuing: Message | None = None, interval_s: float = SAVE_INTERVAL_S, clock=time.monotonic):
        self.store = store
        self.continuing = continuing
        self.base_meta = dict(meta)
        self.interval_s = interval_s
        self.clock = clock
        self.saves = 0  # counted for tests
        self.problem: str | None = None  # the last save that failed (a busy or full store), said once by the window
        kind, target = ("continue", continuing.id) if continuing is not None else (
            ("version", regenerating) if regenerating is not None else ("new", None))
        self._saved_text = ""
        self._last = clock()
        self.draft_id = store.begin_draft(conversation_id, kind, target, self._content(""),
                                          {**self._meta(meta), "finish_reason": INTERRUPTED}, _owner())
        _live.add((str(store.path), self.draft_id))

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
            self.store.save_draft(self.draft_id, self._content(text))
        except ChatStoreError as exc:  # busy or full: the answer goes on, the next save tries again
            self.problem = str(exc)
            return False
        self._saved_text, self._last = text, now
        self.saves += 1
        return True

    def finish(self, text: str, meta: dict) -> Message | None:
        """The answer ended (done, stopped, failed): saved whole, as its draft says. The saved message or None."""
        _live.discard((str(self.store.path), self.draft_id))
        return self.store.commit_draft(self.draft_id, self._content(text), {**self.base_meta, **self._meta(meta)})


def recover_interrupted(store: ChatStore) -> list[int]:
    """Save the answers whose window died while they streamed, marked interrupted; the conversations they are
    in. A draft of a live process (another Hearth's answer in progress) is left alone."""
    found = []
    for draft in store.drafts():
        if (str(store.path), draft["id"]) in _live or (draft["owner"] != _owner() and _owner_alive(draft["owner"])):
            continue
        meta = {**draft["meta"], "finish_reason": INTERRUPTED}
        if store.commit_draft(draft["id"], draft["content"], meta) is not None:
            found.append(draft["conversation_id"])
    return found
