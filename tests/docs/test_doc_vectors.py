"""Dense vectors from all-MiniLM-L6-v2 (converted by Hearth, run by llama.cpp in its own engine process), fused
with BM25: a question in other words than its passage is found by the vectors where BM25 has no word to
match, and a collection indexed without the model gets its vectors on the next run."""

from __future__ import annotations

import numpy as np
import pytest

from app.docs import embed_model
from app.docs.indexer import Indexer
from app.docs.search import search
from app.docs.store import Store

pytestmark = pytest.mark.slow

PASSAGES = {
    "pets.txt": "The feline rested on the rug all afternoon.",
    "money.txt": "Shares on the exchange dropped steeply this morning.",
    "garden.txt": "Water the roses early, before the heat of the day.",
    "car.txt": "Change the engine oil every ten thousand kilometres.",
}


def test_a_paraphrase_is_found_by_meaning_and_fused_with_bm25(embedder, tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    for name, text in PASSAGES.items():
        (folder / name).write_text(text, encoding="utf-8")
    store = Store()
    Indexer(store).add("c", folder)  # BM25 only at first: no vectors
    assert store.collections()[0].vectors == 0

    report = Indexer(store, embedder=embedder).update("c")
    assert (report.added, report.changed, report.embedded) == (0, 0, 4)  # only the missing vectors are made
    ids, matrix = store.vector_matrix([store.collection_id("c")], embedder.model)
    assert matrix.shape == (4, 384) and np.allclose(np.linalg.norm(matrix, axis=1), 1, atol=1e-3)

    question = "Where was the cat sleeping?"  # no word in common with its passage
    assert search(store, question, ["c"], mode="bm25") == []
    by_vector = search(store, question, ["c"], embedder=embedder, mode="vector")
    assert by_vector[0].path.endswith("pets.txt")
    fused = search(store, "When did stock prices fall?", ["c"], embedder=embedder)
    assert fused[0].path.endswith("money.txt") and "vector" in fused[0].ranks
    # A word both lists agree on ranks first in both.
    both = search(store, "engine oil", ["c"], embedder=embedder)
    assert both[0].path.endswith("car.txt") and set(both[0].ranks) == {"bm25", "vector"}
    store.close()


def test_without_an_embedding_model_bm25_serves_and_says_so(monkeypatch):
    monkeypatch.delenv(embed_model.ENV, raising=False)
    monkeypatch.setattr(embed_model, "why_not_makeable", lambda: "the convert extra (torch) is not installed")
    path, note = embed_model.ensure()
    assert path is None and "BM25" in note and "hearth[convert]" in note
