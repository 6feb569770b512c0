"""Passages for a question: BM25 over FTS5, cosine over the chunks' vectors, fused by reciprocal rank.

Reciprocal rank fusion (Cormack et al., 2009) adds 1 / (RRF_K + rank) over the lists a chunk appears in: it
needs no score calibration between BM25 and cosine, and a chunk both lists like rises above one that only one
list likes. With no embedding model (or none of the collection's chunks embedded yet) BM25 serves alone.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where vectors are used: the window imports this module before it paints
    import numpy as np

from app.docs.store import Store

RRF_K = 60
CANDIDATES = 50  # from each list, before fusing
# Below this cosine a passage is about something else: all-MiniLM-L6-v2 gives 0.64 for a paraphrase and 0.05 for
# unrelated sentences, and without a floor the vector list would offer every chunk of a small collection.
MIN_COSINE = 0.2
# Words so common that OR-ing them into an FTS5 query only slows it: BM25 would give them little weight anyway.
STOPWORDS = frozenset("""a an and are as at be by can do does for from how i if in is it its of on or that the
this to was what when where which who why will with you your""".split())
_WORD = re.compile(r"\w+", re.UNICODE)
# In a large index, BM25 over an OR of common words scores most of the index (every match is ranked: 148 ms at
# 100,000 chunks here (p95), where counting a word's matches takes under a millisecond). There the query keeps the
# question's words rarest first while their matches add up to at most MATCH_BUDGET of the chunks, and always
# the KEEP_WORDS rarest: the ranking's work is bounded, and the words left out are the common ones, whose IDF
# barely moves the ranking. Measured on bench docs' 28 questions with this forced on the pydoc corpus (the whole
# query finds 22 answers in its top 5), and at 100,000 chunks (p50/p95): words in over 5% of chunks left out and
# 2 kept found 13 (39/62 ms); over 20% left out and 3 kept, 20 (84/123); a budget of 30% and 3 kept, 20
# (69/106); a budget of 50%, 21 (100/120). Those times were FTS5's ORDER BY rank; with the store's sort over
# bm25() they became 59/78 (30%), 65/84 (50%) and, for the whole query, 91/148. 30% stays: the 100 ms goal for
# a fused search needs the headroom on a slower CPU more than it needs the one answer.
LARGE_INDEX = 20_000
MATCH_BUDGET = 0.3
KEEP_WORDS = 3


@dataclass
class Hit:
    chunk_id: int
    path: str
    page: int | None
    heading: str | None
    start: int
    end: int
    text: str
    collection: str
    score: float
    ranks: dict = field(default_factory=dict)  # {"bm25": 1-based rank, "vector": ...} where it was found

    def where(self) -> str:
        """The source as a citation names it: file.pdf p. 3, notes.md § Setup, data.csv."""
        from pathlib import PurePath

        name = PurePath(self.path).name
        if self.page:
            return f"{name} p. {self.page}"
        if self.heading:
            return f"{name} § {self.heading}"
        return name

    def as_dict(self) -> dict:
        return {"chunk_id": self.chunk_id, "path": self.path, "page": self.page, "heading": self.heading,
                "start": self.start, "end": self.end, "collection": self.collection, "score": round(self.score, 6),
                "ranks": self.ranks, "where": self.where()}


def query_words(question: str) -> list[str]:
    words = [w.lower() for w in _WORD.findall(question)]
    return list(dict.fromkeys([w for w in words if w not in STOPWORDS] or words))


def fts_query(question: str | list[str]) -> str:
    """An FTS5 query that matches any of the question's words (each quoted, so FTS5's own syntax in a question,
    such as AND, NEAR or a stray quote, is text)."""
    words = query_words(question) if isinstance(question, str) else question
    return " OR ".join(f'"{w}"' for w in words)


def bm25_ids(store: Store, question: str, collection_ids: list[int], limit: int = CANDIDATES) -> list[int]:
    words = query_words(question)
    total = store.chunk_count()
    if total > LARGE_INDEX and len(words) > KEEP_WORDS:
        df = {w: store.matches(fts_query([w])) for w in words}
        rare = sorted(words, key=df.get)
        kept, matches = set(rare[:KEEP_WORDS]), sum(df[w] for w in rare[:KEEP_WORDS])
        for word in rare[KEEP_WORDS:]:
            if matches + df[word] > MATCH_BUDGET * total:
                break
            kept.add(word)
            matches += df[word]
        words = [w for w in words if w in kept]
    return store.bm25(fts_query(words), collection_ids, limit)


def nearest(ids: np.ndarray, matrix: np.ndarray, query_vector: np.ndarray, limit: int = CANDIDATES) -> list[int]:
    """Chunk ids by cosine to the query, best first, above MIN_COSINE. A scan of every row (11 ms at 100,000
    chunks of 384 floats here: it reads 150 MB), which numpy does without holding the GIL.

    einsum, not `matrix @ vector`: the matmul goes to OpenBLAS, whose threads take every core and spin after
    the work, and a fused search runs this beside BM25's SQLite on the other core. Measured at 100,000 chunks on
    2 cores: the matmul took 6.5 ms alone but made the fused search 15 ms slower than BM25 alone (p50 and p95);
    einsum, on one core, takes 11 ms and the fused search costs BM25's time plus 1 ms."""
    import numpy as np

    if not len(ids):
        return []
    scores = np.einsum("ij,j->i", matrix, np.asarray(query_vector, dtype=np.float32))
    top = np.argpartition(-scores, min(limit, len(ids) - 1))[:limit] if len(ids) > limit else np.arange(len(ids))
    return [int(ids[i]) for i in top[np.argsort(-scores[top])] if scores[i] >= MIN_COSINE]


def fuse(lists: dict[str, list[int]], k: int = RRF_K) -> list[tuple[int, float, dict]]:
    """(chunk id, fused score, {list name: rank}) best first."""
    scores: dict[int, float] = {}
    ranks: dict[int, dict] = {}
    for name, ids in lists.items():
        for rank, cid in enumerate(ids, 1):
            scores[cid] = scores.get(cid, 0.0) + 1.0 / (k + rank)
            ranks.setdefault(cid, {})[name] = rank
    order = sorted(scores, key=lambda c: (-scores[c], c))
    return [(c, scores[c], ranks[c]) for c in order]


def search(store: Store, question: str, collections: list[str], limit: int = 5, embedder=None,
           mode: str = "fused") -> list[Hit]:
    """The best passages for question in the named collections. mode: fused | bm25 | vector (the benchmark
    measures each); fused without an embedder is BM25."""
    cids = [cid for cid in (store.collection_id(n) for n in collections) if cid is not None]
    lists: dict[str, list[int]] = {}
    vectors = None
    if mode in ("fused", "vector") and embedder is not None and question.strip():
        # The question's embedding (in the embedding engine) and the scan run on a thread beside BM25 (SQLite):
        # both wait outside the GIL, so a fused search costs the longer of the two, not their sum. The matrix
        # is read here first, so only this thread touches the SQLite connection.
        ids, matrix = store.vector_matrix(cids, embedder.model)
        pool = ThreadPoolExecutor(1, thread_name_prefix="hearth-docs-search")
        vectors = pool.submit(lambda: nearest(ids, matrix, embedder.embed([question])[0]))
        pool.shutdown(wait=False)
    if mode in ("fused", "bm25"):
        lists["bm25"] = bm25_ids(store, question, cids)
    if vectors is not None:
        lists["vector"] = vectors.result()
    hits = []
    for cid, score, ranks in fuse(lists)[:limit]:
        row = store.chunk(cid)
        if row:
            hits.append(Hit(cid, row["path"], row["page"], row["heading"], row["start"], row["end"], row["text"],
                            row["collection"], score, ranks))
    return hits
