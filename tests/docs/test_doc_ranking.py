"""The two rankings under a search, on a real SQLite file and real numpy: BM25's column weights (the order is
SQLite's own sort over bm25(), not FTS5's configured rank) and the vector scan's order and cosine floor."""

from __future__ import annotations

import numpy as np

from app.docs.chunker import Chunk
from app.docs.search import MIN_COSINE, fts_query, nearest
from app.docs.store import Store


def test_a_word_in_the_text_ranks_above_the_same_word_in_a_heading(tmp_path):
    store = Store(tmp_path / "index.sqlite3")
    cid = store.collection_id("notes", create=True)
    # Same lengths in each column, so only the weights (text 1.0, heading 0.5) tell the two apart; the heading
    # one goes in first, so an order by row id alone would put it on top.
    store.put_file(cid, "/a/heading.md", 1, 1, "a", "md", 16, [Chunk("other apple pear", 0, 16, heading="kiwi")])
    store.put_file(cid, "/a/text.md", 1, 1, "b", "md", 15, [Chunk("kiwi apple pear", 0, 15, heading="other")])
    store.put_file(cid, "/a/none.md", 1, 1, "c", "md", 15, [Chunk("plum apple pear", 0, 15, heading="other")])
    ids = store.bm25(fts_query("kiwi"), [cid], 5)
    assert [store.chunk(i)["path"] for i in ids] == ["/a/text.md", "/a/heading.md"]
    # The joined query (collections that hold few of the index's chunks) orders the same way.
    other = store.collection_id("other", create=True)
    assert store.bm25(fts_query("kiwi"), [other], 5) == []
    assert store.bm25(fts_query("kiwi"), [other, cid], 1) == ids[:1]
    store.close()


def test_the_vector_scan_orders_by_cosine_and_leaves_out_what_is_about_something_else():
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((5000, 384)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    query = matrix[42] + 0.3 * matrix[7]
    query /= np.linalg.norm(query)
    ids = np.arange(1000, 6000)
    cosine = matrix.astype(np.float64) @ query.astype(np.float64)
    expected = [int(ids[i]) for i in np.argsort(-cosine) if cosine[i] >= MIN_COSINE][:50]
    found = nearest(ids, matrix, query)
    assert found[:2] == [1042, 1007]
    assert found == expected
    # Random directions in 384 dimensions are nearly orthogonal: only the two the query is made of pass the floor.
    assert len(found) == 2
    assert nearest(ids[:0], matrix[:0], query) == []
