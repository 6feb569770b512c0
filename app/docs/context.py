"""A chat's documents turned into its prompt: whole attachments, then the passages retrieved for this question as
numbered sources, then the question. The answer's citations ([1], [2]) map back to those sources, which keep
their chunk, file, page or heading and character span (for --json, the chat store and the window's links).

One DocContext serves one chat. Attachments that go by passages are indexed in an in-memory index of their own
(nothing of a chat's files is written to the collections' index); collections are read from the index in the
data folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.docs.attach import Attachment, Budget
from app.docs.search import Hit, search
from app.docs.store import Store

PASSAGES = 5
ATTACHED = "attached"  # the in-memory collection of this chat's long attachments
INSTRUCTION = ("Answer the question from the sources above when they hold the answer. Cite each source you use "
               "by its number in brackets, like [1].")
_CITED = re.compile(r"\[(\d{1,3})\]")


@dataclass
class Source:
    n: int
    hit: Hit

    def as_dict(self, cited: bool | None = None) -> dict:
        out = {"n": self.n, **self.hit.as_dict()}
        if cited is not None:
            out["cited"] = cited
        return out

    def line(self) -> str:
        """[1] manual.pdf p. 3 (and where the passage sits: the file and its character span)."""
        return f"[{self.n}] {self.hit.where()}  ({self.hit.path}, characters {self.hit.start}-{self.hit.end})"


@dataclass
class Turn:
    content: str  # the user message as the model gets it
    sources: list[Source] = field(default_factory=list)


class DocContext:
    def __init__(self, count, collections: list[str] | None = None, store: Store | None = None, embedder=None,
                 passages: int = PASSAGES):
        """count: text -> tokens for the chat model; store: the collections' index (opened when needed)."""
        self.count = count
        self.collections = list(collections or [])
        self._store = store
        self.embedder = embedder
        self.passages = passages
        self.attachments: list[Attachment] = []
        self.attached = Store(":memory:")

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store()
        return self._store

    @property
    def whole(self) -> list[Attachment]:
        return [a for a in self.attachments if a.mode == "whole"]

    @property
    def by_passages(self) -> list[Attachment]:
        return [a for a in self.attachments if a.mode == "retrieval"]

    @property
    def retrieves(self) -> bool:
        return bool(self.collections or self.by_passages)

    def add(self, attachments: list[Attachment]) -> None:
        """Attachments already planned (app.docs.attach.plan); the long ones are indexed here."""
        cid = self.attached.collection_id(ATTACHED, create=True)
        for a in attachments:
            self.attachments.append(a)
            if a.mode == "retrieval":
                self.attached.put_file(cid, a.path, 0, 0, "", a.kind, len(a.text), a.chunks)
        if self.embedder is not None and self.by_passages:
            from app.docs.indexer import Indexer, IndexReport

            Indexer(self.attached, embedder=self.embedder).embed_missing(cid, IndexReport(ATTACHED))

    def documents_block(self) -> str:
        """The whole attachments as the first message carries them, each with its name."""
        return "\n\n".join(f'<document name="{a.name}">\n{a.text}\n</document>' for a in self.whole)

    def retrieve(self, question: str, limit: Budget) -> list[Source]:
        """The best passages for question, numbered, within what the budget leaves after the whole documents."""
        hits: list[Hit] = []
        if self.by_passages:
            hits += search(self.attached, question, [ATTACHED], self.passages, self.embedder)
        if self.collections:
            hits += search(self.store, question, self.collections, self.passages, self.embedder)
        hits.sort(key=lambda h: -h.score)  # both lists are scored by reciprocal rank, so they compare
        room = limit.tokens - sum(a.tokens for a in self.whole)
        sources: list[Source] = []
        for hit in hits[: self.passages]:
            cost = self.count(hit.text) + 12  # the number, the name and the breaks around it
            if sources and cost > room:
                break
            room -= cost
            sources.append(Source(len(sources) + 1, hit))
        return sources

    def turn(self, question: str, limit: Budget, first: bool = True) -> Turn:
        """The user message for question. first: this is the conversation's first user message, which carries
        the whole documents (later turns find them there, so the prompt cache keeps them)."""
        parts = []
        if first and self.whole:
            parts.append(self.documents_block())
        sources = self.retrieve(question, limit) if self.retrieves else []
        if sources:
            parts.append("Sources:\n\n" + "\n\n".join(f"[{s.n}] {s.hit.where()}\n{s.hit.text}" for s in sources))
            parts.append(INSTRUCTION)
        if not parts:
            return Turn(question)
        parts.append(f"Question: {question}" if sources else question)
        return Turn("\n\n".join(parts), sources)

    def close(self) -> None:
        self.attached.close()
        if self._store is not None:
            self._store.close()


def cited(answer: str, sources: list[Source]) -> list[Source]:
    """The sources the answer names by number, in the order of their numbers."""
    numbers = {int(m) for m in _CITED.findall(answer)}
    return [s for s in sources if s.n in numbers]

