"""`hearth chat --attach FILE` and `--docs NAME`: documents in the terminal chat's prompt, and the answer's sources.

A whole attachment rides in the conversation's first user message (so every turn sees it and the prompt cache
keeps it); passages retrieved for a question ride in that question's message only, numbered, and the history
keeps the question as typed.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from app.core.errors import HearthError

if TYPE_CHECKING:
    from app.docs.context import DocContext, Source

# app.docs (numpy, SQLite, the parsers) is imported where documents are used, not by every `hearth chat`: it cost
# a few hundred milliseconds of every chat's start.


def add_docs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--attach", metavar="FILE", action="append", default=[],
                   help="a document for the chat (repeatable): text, Markdown, code, PDF, DOCX, HTML, CSV; one within "
                   "the budget goes in whole, a longer one by passages retrieved per question")
    p.add_argument("--docs", metavar="NAME", action="append", default=[],
                   help="answer from this collection (repeatable; `hearth docs add` makes one), citing its passages")
    p.add_argument("--docs-budget", metavar="TOKENS", type=int,
                   help="tokens the documents may take (default: half the context minus the conversation)")
    p.add_argument("--embed-model", metavar="GGUF", help="the embedding GGUF for retrieval (default all-MiniLM-L6-v2)")


class ChatDocs:
    def __init__(self, context: DocContext, n_ctx: int, override: int | None):
        self.context = context
        self.n_ctx = n_ctx
        self.override = override

    def _budget(self, system: str | None, history: list[dict]):
        spoken = sum(self.context.count(m["content"]) for m in history) + self.context.count(system or "")
        from app.docs.attach import budget

        return budget(self.n_ctx, spoken, self.override)

    def messages(self, system: str | None, history: list[dict]) -> tuple[list[dict], list[Source]]:
        """The conversation as the model gets it, from the one prompt builder the window uses too
        (app/core/chats/prompt.py): the whole documents ride on the first user message, as the window keeps them
        on the message they came with; the last question carries its sources."""
        from app.core.chats.prompt import ATTACHMENTS, chat_messages
        from app.docs.conversation import attachment_meta

        limit = self._budget(system, history)
        turns = [dict(m) for m in history]
        users = [i for i, m in enumerate(turns) if m["role"] == "user"]
        sources: list[Source] = []
        found = None
        if users:
            if self.context.whole:
                turns[users[0]]["meta"] = {ATTACHMENTS: [attachment_meta(a) for a in self.context.whole]}
            turn = self.context.turn(history[users[-1]]["content"], limit, first=False)
            if turn.sources:
                found, sources = turn.content, turn.sources
        return chat_messages(system, turns, passages=found), sources

    @staticmethod
    def print_sources(answer: str, sources: list[Source]) -> None:
        if not sources:
            return
        from app.docs.context import cited

        named = cited(answer, sources)
        print("Sources:" if named else "Sources given to the model (the answer cites none):")
        for s in named or sources:
            print(f"  {s.line()}")

    def json_fields(self, answer: str, sources: list[Source]) -> dict:
        from app.docs.context import cited

        named = {s.n for s in cited(answer, sources)}
        return {"attachments": [a.as_dict() for a in self.context.attachments],
                "collections": self.context.collections,
                "sources": [s.as_dict(cited=s.n in named) | {"text": s.hit.text} for s in sources]}

    def close(self) -> None:
        self.context.close()
        if self.context.embedder is not None:
            self.context.embedder.close()


def open_docs(args: argparse.Namespace, info: dict, model_path: str | None, first_text: str) -> ChatDocs | None:
    """The chat's documents, or None when it has none. model_path: the local chat model (its vocabulary counts
    tokens exactly); None for a remote one (estimated, and said so)."""
    if not (args.attach or args.docs):
        return None
    from app.commands.docs import embedder_for
    from app.docs.attach import budget, plan, read_attachment
    from app.docs.context import DocContext
    from app.docs.store import Store
    from app.docs.vectors import QUERY_THREADS
    from app.backends.vocab import TokenCounter

    counter = TokenCounter(model_path)
    n_ctx = int(info.get("n_ctx") or 4096)
    if not counter.exact:
        print("hearth: the documents' sizes in tokens are estimates (4 characters a token): the server's model is "
              "not here to count them.", file=sys.stderr)
    store = Store() if args.docs else None
    for name in args.docs:
        if store.collection_id(name) is None:
            raise HearthError(f"There is no collection called {name!r}; `hearth docs list` shows them.")
    attachments = []
    for path in args.attach:
        try:
            attachments.append(read_attachment(path, counter.count))
        except HearthError as exc:  # one file that cannot be attached does not stop the chat
            print(f"hearth: {exc} It was not attached.", file=sys.stderr)
    limit = budget(n_ctx, counter.count(args.system or "") + counter.count(first_text), args.docs_budget)
    plan(attachments, limit)
    for a in attachments:
        how = "in whole" if a.mode == "whole" else "by passages retrieved per question (longer than the budget)"
        print(f"hearth: attached {a.name} ({a.tokens:,} tokens), {how}; documents' budget {limit.describe()}.",
              file=sys.stderr)
    needs_vectors = args.docs or any(a.mode == "retrieval" for a in attachments)
    # Questions are embedded with one thread (app.docs.vectors.QUERY_THREADS), beside the chat model's decode.
    embedder = embedder_for(args.embed_model, allow_make=True, n_threads=QUERY_THREADS) if needs_vectors else None
    context = DocContext(counter.count, args.docs, store, embedder)
    context.add(attachments)
    return ChatDocs(context, n_ctx, args.docs_budget)
