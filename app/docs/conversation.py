"""A stored conversation's documents, for the window: attachments kept on the user messages they came with, and
the collections chosen for the chat.

A user message's meta holds its attachments ([{name, path, tokens, mode, kind, text}]): a whole one keeps its
text there, so regenerating, editing and paging branches give the model exactly the document the user saw
attached; one that goes by passages keeps its path and is read again (once, then cached) when a question needs
its passages. A question's passages are found here, without Qt: the window calls passages() on a worker thread,
because a question's embedding runs in the embedding engine; the prompt is app/core/chats/prompt.py's.
"""

from __future__ import annotations

import os
import threading

from app.core.errors import HearthError
from app.docs.attach import Attachment, Budget, budget, read_attachment
from app.docs.context import DocContext, Source

KEY = "attachments"
# The embedding engine is loaded while a chat searches and stopped this long after its last question, so it
# holds no memory (about 100 MB) while the user only chats.
EMBEDDER_IDLE_S = 120.0


def attachment_meta(a: Attachment) -> dict:
    return {**a.as_dict(), "text": a.text if a.mode == "whole" else ""}


def figure(value, unit: str) -> str:
    """A number and its unit that never part at a line's end ("63.1 tok/" and "s" on the next line, #49.17): a
    no-break space between them, word joiners around a slash."""
    return f"{value}\u00a0{unit.replace('/', chr(0x2060) + '/' + chr(0x2060))}"


def chip_text(meta: dict) -> str:
    """How a message shows one attachment: report.pdf · 1,234 tokens (· by passages)."""
    how = " · by passages" if meta.get("mode") == "retrieval" else ""
    tokens = f"{int(meta.get('tokens') or 0):,}"
    return f"📎 {meta.get('name')} · {figure(tokens, 'tokens')}{how}"


class ConversationDocs:
    def __init__(self):
        self._lock = threading.Lock()
        self._counters: dict[str | None, object] = {}
        self._contexts: dict[tuple, DocContext] = {}
        self._embedder = None
        self._embedder_note: str | None = None
        self._idle: threading.Timer | None = None

    # --- counting and reading --------------------------------------------------------------------------
    def count(self, model_path: str | None):
        """text -> tokens for the chat model (its vocabulary when it is a local file, else an estimate)."""
        from app.backends.vocab import TokenCounter

        with self._lock:
            if model_path not in self._counters:
                self._counters[model_path] = TokenCounter(model_path if model_path and os.path.isfile(model_path)
                                                          else None)
            return self._counters[model_path].count

    def read(self, path: str, model_path: str | None) -> Attachment:
        """A file to attach (HearthError with one sentence when it cannot be)."""
        return read_attachment(path, self.count(model_path))

    @staticmethod
    def decide(pending: list[Attachment], conversation: list[str], count, n_ctx: int,
               override: int | None = None) -> list[dict]:
        """The new message's attachments, each whole while the whole ones fit the budget, as meta."""
        from app.docs.attach import plan

        limit = budget(n_ctx, sum(count(t) for t in conversation), override)
        return [attachment_meta(a) for a in plan(list(pending), limit)]

    # --- the prompt -----------------------------------------------------------------------------------------
    def embedder(self):
        """The embedding model's client, made on first use (None, with a note, when there is none)."""
        from app.docs import embed_model
        from app.docs.vectors import QUERY_THREADS, Embedder

        with self._lock:
            if self._embedder is None and self._embedder_note is None:
                path, note = embed_model.ensure()
                self._embedder = Embedder(path, n_threads=QUERY_THREADS) if path else None
                self._embedder_note = note
            return self._embedder

    @property
    def note(self) -> str | None:
        return self._embedder_note

    def passages(self, turns: list[dict], collections: list[str], model_path: str | None, n_ctx: int,
                 override: int | None = None) -> tuple[str | None, list[Source], list[str]]:
        """(the last question as retrieval writes it: its numbered sources, the instruction and the question, or
        None when nothing was found; those sources; sentences about files that could not be read). turns: the
        conversation as stored [{role, content, meta}], the last question in it. The prompt itself is built by
        app/core/chat_prompt.chat_messages, as for `hearth chat`."""
        from app.core.chats.prompt import whole_documents

        with self._lock:
            if self._idle is not None:  # in use again: not stopped under this question
                self._idle.cancel()
        count = self.count(model_path)
        problems: list[str] = []
        users = [t for t in turns if t["role"] == "user"]
        whole_tokens = sum(int(a.get("tokens") or 0) for t in users for a in whole_documents(t.get("meta")))
        by_passages = [a for t in users for a in (t.get("meta") or {}).get(KEY) or [] if a.get("mode") == "retrieval"]
        found, sources = None, []
        if users and (collections or by_passages):
            spoken = sum(count(t["content"]) for t in turns)
            limit = budget(n_ctx, spoken, override)
            room = Budget(max(0, limit.tokens - whole_tokens), n_ctx, spoken, limit.set_by_user)
            context = self._context(by_passages, model_path, problems)
            context.collections = [c for c in collections if context.store.collection_id(c) is not None]
            turn = context.turn(users[-1]["content"], room, first=False)
            if turn.sources:
                found, sources = turn.content, turn.sources
        self._stop_embedder_later()
        return found, sources, problems

    def _stop_embedder_later(self) -> None:
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
            if self._embedder is not None and self._embedder.client is not None:
                # Embedder.embed opens it again on the next question that needs it.
                self._idle = threading.Timer(EMBEDDER_IDLE_S, self._embedder.close)
                self._idle.daemon = True
                self._idle.start()

    def _context(self, by_passages: list[dict], model_path: str | None, problems: list[str]) -> DocContext:
        key = (model_path, tuple(sorted(a["path"] for a in by_passages)))
        with self._lock:
            context = self._contexts.get(key)
        if context is not None:
            return context
        read = []
        for a in by_passages:
            try:
                attachment = read_attachment(a["path"], self.count(model_path))
            except HearthError as exc:
                problems.append(f"{exc} Its passages are left out.")
                continue
            attachment.mode = "retrieval"
            read.append(attachment)
        context = DocContext(self.count(model_path), embedder=self.embedder())
        context.add(read)
        with self._lock:
            self._contexts[key] = context
        return context

    def close(self) -> None:
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle.join(5)
            for context in self._contexts.values():
                context.close()
            self._contexts.clear()
            if self._embedder is not None:
                self._embedder.close()
            for counter in self._counters.values():
                counter.close()
            self._counters.clear()

