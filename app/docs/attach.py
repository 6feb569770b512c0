"""Files attached to a chat: a document that fits the budget goes into the prompt whole, with its name; a
longer one is chunked and indexed (in memory, for this chat) and its passages are retrieved per question.

The budget is half the context minus the conversation so far, so the documents leave the other half for the
conversation to grow and the answer to be written; the user can set it instead (--docs-budget, the window's
field). Attachments are decided in the order given: each goes in whole while the whole ones together fit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import HearthError
from app.docs.chunker import chunk
from app.docs.indexer import display_path, read_whole
from app.docs.parsers import MAX_FILE_BYTES, DocProblem, full_text, parse


@dataclass
class Budget:
    tokens: int  # for documents: whole ones and retrieved passages together
    n_ctx: int
    conversation: int
    set_by_user: bool = False

    def describe(self) -> str:
        if self.set_by_user:
            return f"{self.tokens:,} tokens (set)"
        return (f"{self.tokens:,} tokens (half the {self.n_ctx:,}-token context minus the conversation's "
                f"{self.conversation:,})")


def budget(n_ctx: int, conversation_tokens: int, override: int | None = None) -> Budget:
    if override is not None:
        return Budget(max(0, int(override)), n_ctx, conversation_tokens, True)
    return Budget(max(0, n_ctx // 2 - conversation_tokens), n_ctx, conversation_tokens)


@dataclass
class Attachment:
    name: str
    path: str
    tokens: int
    mode: str  # "whole" (in the prompt as it is) or "retrieval" (passages per question)
    text: str = ""
    chunks: list | None = None  # retrieval: the chunks to index
    kind: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "tokens": self.tokens, "mode": self.mode, "kind": self.kind}

    def label(self) -> str:
        """The chip's text: report.pdf · 1,234 tokens."""
        how = "" if self.mode == "whole" else " · by passages"
        return f"{self.name} · {self.tokens:,} tokens{how}"


def read_attachment(path: str | os.PathLike, count) -> Attachment:
    """A file's text and size in tokens (count: text -> tokens); its mode is decided by plan(). Raises DocProblem
    or HearthError with one sentence for a file that cannot be attached."""
    path = Path(os.path.expanduser(os.fspath(path)))
    name = display_path(path.name)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise HearthError(f"{display_path(path)} cannot be attached: {exc.strerror or exc}.") from None
    if not os.path.isfile(path):
        raise HearthError(f"{display_path(path)} is not a file; `hearth docs add` indexes a folder.")
    if st.st_size > MAX_FILE_BYTES:
        raise DocProblem(f"{name} is too large to attach; add its folder with `hearth docs add` instead.")
    try:
        data, changed = read_whole(path, st)
    except OSError as exc:
        raise HearthError(f"{name} cannot be read: {exc.strerror or exc}.") from None
    if changed:
        raise DocProblem(f"{name} changed while it was read; attach it again.")
    parsed = parse(name, data)
    text, _ = full_text(parsed)
    return Attachment(name, display_path(path.resolve()), count(text), "whole", text, chunk(parsed), parsed.kind)


def plan(attachments: list[Attachment], limit: Budget) -> list[Attachment]:
    """Mark each attachment whole or retrieval: whole while the whole ones together fit the budget."""
    used = 0
    for a in attachments:
        if used + a.tokens <= limit.tokens:
            a.mode = "whole"
            used += a.tokens
        else:
            a.mode = "retrieval"
    return attachments
