"""`hearth docs add | list | rm | search`: collections of documents for `hearth chat --docs NAME`."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from contextlib import closing

from app.core.errors import HearthError
from app.core.terminal_text import one_line
from app.docs.vectors import QUERY_THREADS


def register(sub) -> None:
    p = sub.add_parser("docs", help="index folders of documents to chat with (collections)",
                       description="Collections of documents, indexed in the data folder for `hearth chat --docs NAME`. "
                       "Nothing leaves this machine.")
    dsub = p.add_subparsers(dest="docs_command", metavar="ACTION", required=True)

    add = dsub.add_parser("add", help="add a folder or file to a collection and index it (again: only what changed)")
    add.add_argument("path", metavar="PATH")
    add.add_argument("--collection", "-c", metavar="NAME", required=True)
    add.add_argument("--no-vectors", action="store_true", help="full-text search only (BM25): no embedding model")
    add.add_argument("--embed-model", metavar="GGUF", help="an embedding GGUF instead of all-MiniLM-L6-v2")
    add.add_argument("--json", action="store_true", help="print the report as JSON")
    add.set_defaults(func=run_add)

    ls = dsub.add_parser("list", help="the collections, their folders and sizes")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--problems", action="store_true", help="also the files that gave no text, and why")
    ls.set_defaults(func=run_list)

    rm = dsub.add_parser("rm", help="remove a collection and its index (the files themselves stay)")
    rm.add_argument("name", metavar="NAME")
    rm.set_defaults(func=run_rm)

    search = dsub.add_parser("search", help="the passages that answer a question")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("--collection", "-c", metavar="NAME", action="append",
                        help="search this collection (repeatable; default: all)")
    search.add_argument("--limit", "-k", dest="k", type=int, default=5, metavar="N", help="passages to show (default 5)")
    search.add_argument("--mode", choices=("fused", "bm25", "vector"), default="fused",
                        help="fused (default): BM25 and vectors by reciprocal rank; or one of them alone")
    search.add_argument("--embed-model", metavar="GGUF", help="the embedding GGUF the collection was indexed with")
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=run_search)


def embedder_for(explicit: str | None, allow_make: bool, doing: str = "searching", n_threads: int | None = None):
    """The embedding model's client (loaded on first use), or None with the reason said once."""
    from app.docs import embed_model
    from app.docs.vectors import Embedder

    if embed_model.find(explicit) is None and allow_make and embed_model.why_not_makeable() is None:
        print(f"hearth: making the embedding model {embed_model.MODEL_NAME} (once, a few seconds)...", file=sys.stderr)
    path, note = embed_model.ensure(explicit, allow_make=allow_make)
    if path is None:
        print(f"hearth: {doing} {note}.", file=sys.stderr)
        return None
    return Embedder(path, n_threads=n_threads)


def _progress_printer():
    tty = sys.stderr.isatty()
    last = [__import__("time").monotonic()]  # the first line after an interval, not at once

    def show(p) -> None:
        import time

        now = time.monotonic()
        if now - last[0] < (0.2 if tty else 5.0) and p.done < p.total:
            return
        last[0] = now
        what = "files read" if p.phase == "text" else "chunks embedded"
        left = f", {p.eta_s:.0f} s left" if p.eta_s is not None else ""
        line = f"{p.done:,}/{p.total:,} {what}, {p.chunks:,} chunks{left}"
        sys.stderr.write(f"\r{line:<72}" if tty else line + "\n")
        sys.stderr.flush()

    return show


def run_add(args: argparse.Namespace) -> int:
    import signal

    from app.docs.indexer import Indexer
    from app.docs.store import Store

    # The embedding engine starts only if some chunk needs a vector (a re-index of an unchanged folder needs none).
    embedder = None if args.no_vectors else embedder_for(args.embed_model, allow_make=True, doing="indexing")
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())  # Ctrl-C stops after the file in hand
    store = Store()
    try:
        report = Indexer(store, embedder=embedder, progress=_progress_printer(), cancel=cancel).add(
            args.collection, args.path)
    finally:
        signal.signal(signal.SIGINT, previous)
        if embedder is not None:
            embedder.close()
        store.close()
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    if args.json:
        print(json.dumps({**report.__dict__, "problems": [{"path": p, "problem": s} for p, s in report.problems]},
                         indent=2, ensure_ascii=False))
    else:
        for _, sentence in report.problems:
            print(f"hearth: {one_line(sentence)}", file=sys.stderr)
        state = "Cancelled; the index holds what was done" if report.cancelled else "Indexed"
        print(f"{state}: {args.collection}: {report.added} added, {report.changed} changed, {report.removed} removed, "
              f"{report.unchanged} unchanged; {report.chunks:,} chunks written, {report.embedded:,} embedded, "
              f"in {report.seconds:.1f} s.")
    return 130 if report.cancelled else 0


def run_list(args: argparse.Namespace) -> int:
    from app.core.units import human_size
    from app.docs.store import Store

    with closing(Store()) as store:
        rows = store.collections()
        problems = {c.name: store.problems(store.collection_id(c.name)) for c in rows} if args.problems else {}
        size = store.size_bytes()
    if args.json:
        print(json.dumps({"index": str(store.path), "index_bytes": size,
                          "collections": [{**c.__dict__, **({"problem_files": [{"path": p, "problem": s} for p, s in
                                                                              problems[c.name]]} if args.problems else {})}
                                          for c in rows]}, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print("No collections yet; add one with  hearth docs add FOLDER --collection NAME")
        return 0
    for c in rows:
        vectors = f"{c.vectors:,} with vectors" if c.vectors else "no vectors (BM25 only)"
        print(f"{one_line(c.name)}: {c.files:,} files, {c.chunks:,} chunks, {vectors}"
              + (f", {c.problems} without text" if c.problems else ""))
        for root in c.roots:
            print(f"  {one_line(root)}")
        for path, sentence in problems.get(c.name, []):
            print(f"  ! {one_line(sentence)}")
    print(f"Index: {store.path} ({human_size(size)})")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from app.docs.store import Store

    with closing(Store()) as store:
        if not store.remove_collection(args.name):
            raise HearthError(f"There is no collection called {args.name!r}; `hearth docs list` shows them.")
    print(f"Removed the collection {args.name} and its index; the files themselves are untouched.")
    return 0


def run_search(args: argparse.Namespace) -> int:
    from app.docs.search import search
    from app.docs.store import Store

    with closing(Store()) as store:
        names = args.collection or [c.name for c in store.collections()]
        missing = [n for n in names if store.collection_id(n) is None]
        if missing:
            raise HearthError(f"There is no collection called {missing[0]!r}; `hearth docs list` shows them.")
        embedder = None
        if args.mode != "bm25":
            embedder = embedder_for(args.embed_model, allow_make=False, n_threads=QUERY_THREADS)
            if embedder is None and args.mode == "vector":
                raise HearthError("--mode vector needs an embedding model; see `hearth docs add --help`.")
        try:
            hits = search(store, args.query, names, args.k, embedder, args.mode)
        finally:
            if embedder is not None:
                embedder.close()
    if args.json:
        print(json.dumps([{"n": i, **h.as_dict(), "text": h.text} for i, h in enumerate(hits, 1)], indent=2,
                         ensure_ascii=False))
        return 0
    if not hits:
        print("Nothing found.")
    for i, h in enumerate(hits, 1):
        print(f"[{i}] {one_line(h.where())}  ({one_line(h.path)}, characters {h.start}-{h.end})")
        print("    " + one_line(" ".join(h.text.split())[:300]))
    return 0
