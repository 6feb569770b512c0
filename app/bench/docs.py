"""`hearth bench docs`: indexing and retrieval on a corpus every Python ships, Python's pydoc topics.

The corpus is `pydoc_data.topics` (79 topics of the language reference, about 465 KB of text), one file per
topic, indexed into a throwaway index (never the user's). It measures:

- indexing: the text pass alone (FTS5/BM25) and with the embedding model, chunks per second and the whole time;
  the embedding model's own rate on the same chunks in the same engine (so the indexer's overhead shows as a
  ratio: the goal is at least 0.8x);
- retrieval: query latency p50/p95 for BM25 alone and fused (the fused time includes embedding the question);
- recall@5 for BM25, vectors and fused on QUESTIONS: each names the topics that answer it and is phrased in other
  words than the passage (no run of four words in common with its topic's text; the test checks that);
- with --scale-chunks N, latency again with the index padded to N chunks (copies of the corpus's chunks and their
  vectors under other file names: the time depends on how many rows are scanned, not on what they say).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from app.protocol.option_spec import count, option

# (question, topics whose text answers it)
QUESTIONS: list[tuple[str, tuple[str, ...]]] = [
    ("How do I make cleanup code run when leaving a block, even after an error?", ("try",)),
    ("What declaration lets a function rebind a name at module level?", ("global",)),
    ("How can a function hand back values one by one and resume where it stopped?", ("yield",)),
    ("How do I write a small unnamed function inside one expression?", ("lambda",)),
    ("Which statement checks a condition while debugging and stops when it fails?", ("assert",)),
    ("What decides whether an object counts as true or false in a condition?", ("truth", "booleans")),
    ("How do I take the part of a list between two positions?", ("slicings", "typesseq")),
    ("How do I pad or align values when turning them into text with str.format?", ("formatstrings",)),
    ("How does Python find and load code from another module file?", ("import",)),
    ("How can I be sure a file gets closed when I am done with it?", ("with", "context-managers")),
    ("How do I leave a loop before it has finished?", ("break",)),
    ("How do I skip ahead to the next round of a loop?", ("continue",)),
    ("How do I signal an error from my own code?", ("raise", "exceptions")),
    ("Which special methods let a class decide how its instances print or compare?", ("customization",)),
    ("How does an inner function change a variable of the function around it?", ("nonlocal", "naming")),
    ("How are numbers with a fractional part written in source code?", ("floating", "numbers")),
    ("How do I look things up by key in a mapping and add entries?", ("typesmapping", "dict")),
    ("What moves the bits of an integer left or right?", ("shifting",)),
    ("How do I raise a number to an exponent?", ("power",)),
    ("Which string methods turn letters to capitals or small letters?", ("string-methods",)),
    ("How do I repeat a block for as long as a condition holds?", ("while",)),
    ("How do I go over the items of a sequence one at a time?", ("for",)),
    ("How do I define a class that inherits from another one?", ("class",)),
    ("How do I give a function's parameters default values?", ("function", "calls")),
    ("How do I step through my program line by line to find a bug?", ("debugger",)),
    ("How does a coroutine wait for another awaitable to finish?", ("await", "async")),
    ("How do I remove a name or an item of a list?", ("del", "typesseq-mutable")),
    ("What happens to a program whose error nobody catches?", ("exceptions",)),
]


@dataclass
class DocsBenchOptions:
    topics: int = option(0, "--topics", "index only N pydoc topics (default: all 79)", "N", bound=count(0, "topics"))
    # the corpus this many times over (a 20 MB corpus from the 0.47 MB one)
    copies: int = option(1, "--copies", "index the corpus N times over, each copy a folder of its own (43: about 20 "
                         "MB)", "N", bound=count(1, "copies"))
    vectors: bool = option(True, "--no-vectors", "BM25 only: no embedding model", negate=True)
    embed_model: str | None = option(None, "--embed-model", "an embedding GGUF instead of all-MiniLM-L6-v2", "GGUF")
    scale_chunks: int = option(0, "--scale-chunks", "also measure latency with the index padded to N chunks (the "
                               "goal: 100,000 under 100 ms)", "N", bound=count(0, "chunks"))
    json: bool = option(False, "--json")


def corpus(folder: Path, limit: int = 0, copies: int = 1) -> int:
    """Write the pydoc topics as files (the questions' topics first, so a limited corpus still holds their answers);
    returns the bytes written. Copies after the first go in folders of their own under the same names, so a
    hit's file name still says its topic."""
    from pydoc_data.topics import topics

    wanted = list(dict.fromkeys(t for _, ts in QUESTIONS for t in ts if t in topics))
    names = wanted + sorted(set(topics) - set(wanted))
    names = names[:limit] if limit else names
    size = 0
    for copy in range(max(1, copies)):
        into = folder / f"copy-{copy}" if copy else folder
        into.mkdir(exist_ok=True)
        for name in names:
            data = topics[name].encode("utf-8")
            (into / f"{name}.txt").write_bytes(data)
            size += len(data)
    return size


def pad(store, total: int, model: str | None) -> int:
    """Fill the index up to total chunks with copies of its own chunks (and their vectors); returns the count."""
    import numpy as np

    from app.docs.chunker import Chunk

    cid = store.collection_id("bench")
    rows = store.db.execute("SELECT c.text, c.start, c.end, v.v FROM chunks c LEFT JOIN vectors v ON "
                            "v.chunk_id = c.id AND v.model = ? ORDER BY c.id", (model or "",)).fetchall()
    have = store.db.execute("SELECT count(*) FROM chunks").fetchone()[0]
    copy = 0
    while have < total and rows:
        batch = rows[: total - have]
        fid = store.put_file(cid, f"/padding/{copy}.txt", 0, 0, "", "text", 0,
                             [Chunk(text, start, end) for text, start, end, _ in batch])
        if model:
            ids = [r[0] for r in store.db.execute("SELECT id FROM chunks WHERE file_id = ? ORDER BY ord", (fid,))]
            store.put_vectors(ids, [np.frombuffer(v, dtype=np.float32) for *_, v in batch], model)
        have += len(batch)
        copy += 1
    return have


def _latency(store, embedder, mode: str) -> dict:
    from app.docs.search import search

    times = []
    for question, _ in QUESTIONS:
        start = time.perf_counter()
        search(store, question, ["bench"], 5, embedder, mode)
        times.append((time.perf_counter() - start) * 1000)
    return {"p50_ms": round(_percentile(times, 0.5), 2), "p95_ms": round(_percentile(times, 0.95), 2)}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _recall_and_latency(store, embedder, mode: str, present: set[str]) -> tuple[float, list[float], int]:
    from app.docs.search import search

    hits_found, times, asked = 0, [], 0
    for question, topics in QUESTIONS:
        if not present.intersection(topics):
            continue
        asked += 1
        start = time.perf_counter()
        hits = search(store, question, ["bench"], 5, embedder, mode)
        times.append((time.perf_counter() - start) * 1000)
        if any(Path(h.path).stem in topics for h in hits):
            hits_found += 1
    return (hits_found / asked if asked else 0.0), times, asked


def _at_scale(store, embedder, total: int) -> dict:
    start = time.perf_counter()
    chunks = pad(store, total, embedder.model if embedder else None)
    print(f"Padded the index to {chunks:,} chunks in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    result = {"chunks": chunks, "bm25": _latency(store, None, "bm25")}
    if embedder is not None:
        result["fused"] = _latency(store, embedder, "fused")
    return result


def run(opts: DocsBenchOptions) -> int:
    from app.docs import embed_model
    from app.docs.indexer import Indexer
    from app.docs.store import Store
    from app.docs.vectors import QUERY_THREADS, Embedder

    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="hearth-bench-docs-") as tmp:
        folder = Path(tmp) / "pydoc-topics"
        folder.mkdir()
        out["corpus_bytes"] = corpus(folder, opts.topics, opts.copies)
        present = {p.stem for p in folder.glob("*.txt")}
        out["files"] = len(present) * max(1, opts.copies)
        print(f"Corpus: {len(present)} pydoc topics, {max(1, opts.copies)} copies, {out['corpus_bytes'] / 1e6:.2f} MB",
              file=sys.stderr)

        fts = Store(Path(tmp) / "fts.sqlite3")
        report = Indexer(fts).add("bench", folder)
        out["fts"] = {"seconds": round(report.seconds, 3), "chunks": report.chunks,
                      "chunks_per_s": round(report.chunks / report.seconds, 1),
                      "mb_per_s": round(out["corpus_bytes"] / 1e6 / report.seconds, 2)}
        recall, times, asked = _recall_and_latency(fts, None, "bm25", present)
        out["questions"] = asked
        out["bm25"] = {"recall_at_5": round(recall, 3), "p50_ms": round(_percentile(times, 0.5), 2),
                       "p95_ms": round(_percentile(times, 0.95), 2)}
        print(f"Text pass (FTS5 only): {report.chunks} chunks in {report.seconds:.2f} s", file=sys.stderr)

        path = None
        if opts.vectors:
            path, note = embed_model.ensure(opts.embed_model)
            if path is None:
                out["vectors_note"] = f"vectors not measured: {note}"
                print(f"hearth: {out['vectors_note']}", file=sys.stderr)
        if path is not None:
            with Embedder(path) as embedder:
                # A sample from across the corpus (every tenth chunk): its chunks are as long as the whole's. It is
                # embedded before and after the indexing and the two rates averaged, so that a change in what else
                # the machine runs shows as a gap between them rather than as the indexer's cost.
                texts = [text for _, text in fts.db.execute("SELECT id, text FROM chunks WHERE id % 10 = 0 LIMIT 64")]

                def model_rate() -> float:
                    start = time.perf_counter()
                    for i in range(0, len(texts), 16):
                        embedder.embed(texts[i:i + 16])
                    return len(texts) / (time.perf_counter() - start)

                before = model_rate()
                print(f"Embedding model alone: {before:.1f} chunks/s", file=sys.stderr)
                vec = Store(Path(tmp) / "vec.sqlite3")
                report = Indexer(vec, embedder=embedder).add("bench", folder)
                after = model_rate()
                raw = (before + after) / 2
                embed_s = report.seconds - out["fts"]["seconds"]
                out["with_vectors"] = {"seconds": round(report.seconds, 2), "chunks": report.chunks,
                                       "chunks_per_s": round(report.chunks / report.seconds, 2),
                                       "model_chunks_per_s": round(raw, 2),
                                       "model_chunks_per_s_before_after": [round(before, 2), round(after, 2)],
                                       "ratio_to_model": round(report.chunks / max(embed_s, 1e-9) / raw, 2)}
            # Questions as Hearth embeds them when it searches: one thread (app.docs.vectors.QUERY_THREADS).
            with Embedder(path, n_threads=QUERY_THREADS) as asker:
                for mode in ("vector", "fused"):
                    recall, times, _ = _recall_and_latency(vec, asker, mode, present)
                    out[mode] = {"recall_at_5": round(recall, 3), "p50_ms": round(_percentile(times, 0.5), 2),
                                 "p95_ms": round(_percentile(times, 0.95), 2)}
                if opts.scale_chunks:
                    out["at_scale"] = _at_scale(vec, asker, opts.scale_chunks)
            vec.close()
        if opts.scale_chunks and "at_scale" not in out:
            out["at_scale"] = _at_scale(fts, None, opts.scale_chunks)
        fts.close()
    if opts.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"Indexing {out['files']} files ({out['corpus_bytes'] / 1e6:.2f} MB):")
    f = out["fts"]
    print(f"  text only (FTS5):  {f['seconds']:.2f} s, {f['chunks']} chunks, {f['chunks_per_s']:,.0f} chunks/s, "
          f"{f['mb_per_s']:.1f} MB/s")
    if "with_vectors" in out:
        v = out["with_vectors"]
        print(f"  with vectors:      {v['seconds']:.1f} s, {v['chunks_per_s']:.1f} chunks/s; the model alone "
              f"{v['model_chunks_per_s']:.1f} chunks/s (indexing at {v['ratio_to_model']:.2f}x of it)")
    print(f"Retrieval over {out['questions']} questions in other words than their passages:")
    print(f"  {'':8} {'recall@5':>9} {'p50 ms':>8} {'p95 ms':>8}")
    for mode in ("bm25", "vector", "fused"):
        if mode in out:
            r = out[mode]
            print(f"  {mode:8} {r['recall_at_5']:>9.2f} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f}")
    if "vectors_note" in out:
        print(f"  ({out['vectors_note']})")
    if "at_scale" in out:
        scale = out["at_scale"]
        print(f"Latency at {scale['chunks']:,} chunks: " + "; ".join(
            f"{mode} p50 {scale[mode]['p50_ms']:.1f} ms, p95 {scale[mode]['p95_ms']:.1f} ms"
            for mode in ("bm25", "fused") if mode in scale))
    return 0
