"""`hearth bench docs`: its question set is fair (answers sit in known topics, in other words than the passage),
and its BM25-only run reports indexing and retrieval figures on the pydoc topics."""

from __future__ import annotations

import json
import re

from pydoc_data.topics import topics

from app.bench import docs as bench_docs
from app.bench.docs import QUESTIONS, DocsBenchOptions


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


def test_every_question_is_answered_by_a_known_topic_in_other_words():
    for question, answers in QUESTIONS:
        assert answers and all(t in topics for t in answers), question
        q = _words(question)
        for topic in answers:
            body = f" {' '.join(_words(topics[topic]))} "
            for i in range(len(q) - 3):
                assert f" {' '.join(q[i:i + 4])} " not in body, (question, topic, q[i:i + 4])


def test_a_bm25_only_run_reports_rates_latency_and_recall(capsys):
    assert bench_docs.run(DocsBenchOptions(topics=12, vectors=False, scale_chunks=400, json=True)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["files"] == 12 and out["fts"]["chunks"] > 12 and out["fts"]["chunks_per_s"] > 0
    bm25 = out["bm25"]
    assert 0 < out["questions"] <= len(QUESTIONS)
    assert 0.3 <= bm25["recall_at_5"] <= 1 and 0 < bm25["p50_ms"] <= bm25["p95_ms"]
    assert "vector" not in out and "fused" not in out
    scale = out["at_scale"]
    assert scale["chunks"] == 400 and 0 < scale["bm25"]["p50_ms"] <= scale["bm25"]["p95_ms"]


def test_copies_multiply_the_corpus(capsys, tmp_path):
    assert bench_docs.run(DocsBenchOptions(topics=5, copies=3, vectors=False, json=True)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["files"] == 15
    (tmp_path / "one").mkdir()
    assert out["corpus_bytes"] == 3 * bench_docs.corpus(tmp_path / "one", 5)


def test_a_large_index_s_pruned_query_still_finds_the_passages(tmp_path, monkeypatch):
    """Past LARGE_INDEX chunks the query leaves out common words (for speed). Forced on the whole pydoc corpus,
    it must find nearly every answer the whole query finds (20 of 22 measured; leaving out words in over 5% of
    the chunks and keeping 2 found 13)."""
    from pathlib import Path

    from app.docs import search as S
    from app.docs.indexer import Indexer
    from app.docs.store import Store

    folder = tmp_path / "topics"
    folder.mkdir()
    bench_docs.corpus(folder)
    store = Store(tmp_path / "index.sqlite3")
    Indexer(store).add("bench", folder)

    def found(large_index: int) -> int:
        monkeypatch.setattr(S, "LARGE_INDEX", large_index)
        return sum(any(Path(h.path).stem in answers for h in S.search(store, q, ["bench"], 5, None, "bm25"))
                   for q, answers in QUESTIONS)

    whole, pruned = found(10**9), found(100)
    store.close()
    assert whole >= 20 and pruned >= whole - 3
