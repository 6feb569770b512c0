"""Index a collection's folders and files: walk, compare, parse, chunk, store, then embed.

Incremental: a file whose size and mtime match its row is not read again; one whose bytes hash the same as
before only gets its new mtime; a changed one is parsed again; a file no longer found leaves the index. Two
passes: the text pass makes every file searchable by BM25 at once, the vector pass then embeds the chunks
that have no vector yet (so a cancelled or failed vector pass is finished by the next run, and a collection
indexed before an embedding model existed gets its vectors later).

Bad input costs that file one sentence (its row keeps it, so an encrypted PDF is not re-read every time) and
the walk goes on. Cancelling (an Event checked between files, inside a file while it is unpacked and parsed, and
between embedding batches) stops at once in the text pass (the file in hand is left for the next run) and after
the batch in hand in the vector pass; each file is written in one transaction, so the index stays consistent.
Progress names the file being read (IndexProgress.current) before it is read. A run is marked in the store while
it lasts (Store.begin_run), so a run a crash or a kill ended is said at the next start (Store.interrupted). A gate
(an Event, set while indexing may run) lets the window hold indexing while the chat model generates.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from app.core.store.bounded_read import Cancelled
from app.core.errors import HearthError
from app.core.units import human_size
from app.docs.chunker import chunk
from app.docs.parsers import MAX_FILE_BYTES, DocProblem, full_text, parse
from app.docs.store import DocsIndexError, Store

EMBED_BATCH = 16


@dataclass
class IndexProgress:
    phase: str  # "text" (reading files) or "vectors" (embedding chunks)
    done: int  # files (text) or chunks (vectors) done in this phase
    total: int
    chunks: int  # chunks written so far in this run
    elapsed_s: float
    eta_s: float | None  # time left in this phase, once there is a rate to tell it by
    current: str = ""


@dataclass
class IndexReport:
    collection: str
    added: int = 0
    changed: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0  # chunks written in this run
    embedded: int = 0  # chunks given a vector in this run
    problems: list[tuple[str, str]] = field(default_factory=list)  # (path, one sentence)
    vectors_note: str | None = None  # why there are no vectors, when there are none
    cancelled: bool = False
    seconds: float = 0.0


def display_path(path: Path | str) -> str:
    """A path as text the index can store: a name whose bytes are not UTF-8 (a file from an old system) keeps
    its odd bytes as \\xNN escapes, the same on every walk, so it is found again next time."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


class Indexer:
    def __init__(self, store: Store, embedder=None, progress: Callable[[IndexProgress], None] | None = None,
                 cancel: threading.Event | None = None, gate: threading.Event | None = None,
                 max_file_bytes: int = MAX_FILE_BYTES):
        """embedder: app.docs.vectors.Embedder or None (BM25 only); gate: indexing waits while it is clear."""
        self.store = store
        self.embedder = embedder
        self.progress = progress
        self.cancel = cancel or threading.Event()
        self.gate = gate
        self.max_file_bytes = max_file_bytes
        self._started = 0.0

    def add(self, collection: str, path: str | os.PathLike) -> IndexReport:
        """Add a folder or file to a collection (made if new) and index the whole collection."""
        self.store.writable()
        cid = self.store.collection_id(collection, create=True)
        root = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
        if not os.path.lexists(root):
            raise HearthError(f"{display_path(root)} does not exist.")
        self.store.add_root(cid, os.fsdecode(root))
        return self.update(collection)

    def update(self, collection: str) -> IndexReport:
        """Index a collection's folders again: only what changed is read."""
        self.store.writable()
        cid = self.store.collection_id(collection)
        if cid is None:
            raise HearthError(f"There is no collection called {collection!r}; `hearth docs list` shows them.")
        self._started = time.monotonic()
        try:  # the mark a crash or a kill leaves behind: the next start says the run was interrupted
            self.store.begin_run(cid)
        except sqlite3.OperationalError:
            pass  # a disk that cannot take the mark: the run itself says why in its own words
        try:
            return self._update(cid, collection)
        finally:
            try:
                self.store.end_run(cid)
            except sqlite3.Error:
                pass  # a full disk's error is the one already on its way

    def _update(self, cid: int, collection: str) -> IndexReport:
        report = IndexReport(collection)
        seen: dict[str, tuple[Path, os.stat_result]] = {}
        for root in self.store.roots(cid):
            for path, st in walk(Path(root), report.problems):
                seen.setdefault(display_path(path), (path, st))
        known = self.store.files(cid)
        for gone in sorted(set(known) - set(seen)):
            self.store.remove_file(cid, gone)
            report.removed += 1
        todo = []
        for key, (path, st) in sorted(seen.items()):
            row = known.get(key)
            if row and row.size == st.st_size and row.mtime_ns == st.st_mtime_ns:
                report.unchanged += 1
                if row.problem:
                    report.problems.append((key, row.problem))
            else:
                todo.append((key, path, st, row))
        try:
            self._text_pass(cid, todo, report)
            if not report.cancelled:
                self.embed_missing(cid, report)
        except sqlite3.OperationalError as exc:
            from app.core.store import disk_errors
            if disk_errors.kind(exc) is None:
                raise
            # Each file is written in one transaction: what was written before stays, whole.
            raise DocsIndexError(f"The documents' index {self.store.path} could not be written further: "
                                 f"{disk_errors.describe(self.store.path, exc)}; it keeps what was indexed before, "
                                 "and the next run goes on from there.") from None
        report.seconds = time.monotonic() - self._started
        return report

    # --- the text pass ----------------------------------------------------------------------------------
    def _text_pass(self, cid: int, todo: list, report: IndexReport) -> None:
        total_bytes = sum(min(st.st_size, self.max_file_bytes) for _, _, st, _ in todo) or 1
        done_bytes, phase_start = 0, time.monotonic()
        for i, (key, path, st, row) in enumerate(todo):
            if self._should_stop():
                report.cancelled = True
                return
            self._report("text", i, len(todo), report.chunks, phase_start, done_bytes / total_bytes, key)
            try:
                self._index_file(cid, key, path, st, row, report)
            except Cancelled:  # inside the file: nothing of it was written, the next run reads it again
                report.cancelled = True
                return
            done_bytes += min(st.st_size, self.max_file_bytes)
        self._report("text", len(todo), len(todo), report.chunks, phase_start, 1.0, "")

    def _index_file(self, cid: int, key: str, path: Path, st: os.stat_result, row, report: IndexReport) -> None:
        name = display_path(path.name)
        if st.st_size > self.max_file_bytes:
            problem = (f"{name} is {human_size(st.st_size)}, more than the {human_size(self.max_file_bytes)} "
                       "Hearth indexes from one file; it was left out.")
            return self._problem(cid, key, st, problem, row, report)
        try:
            data, changed = read_whole(path, st)
        except OSError as exc:
            problem = f"{name} cannot be read ({exc.strerror or exc}); it was left out."
            return self._problem(cid, key, st, problem, row, report, retry=True)
        if changed:
            problem = f"{name} changed while it was read; it will be indexed on the next pass."
            return self._problem(cid, key, st, problem, row, report, retry=True)
        digest = hashlib.sha256(data).hexdigest()
        if row and row.sha256 == digest and not row.problem:
            self.store.touch(row.id, st.st_size, st.st_mtime_ns)
            report.unchanged += 1
            return
        try:
            parsed = parse(name, data, self.cancel)
        except DocProblem as exc:
            return self._problem(cid, key, st, str(exc), row, report, digest=digest)
        chunks = chunk(parsed)
        self.store.put_file(cid, key, st.st_size, st.st_mtime_ns, digest, parsed.kind, len(full_text(parsed)[0]),
                            chunks)
        report.chunks += len(chunks)
        if row:
            report.changed += 1
        else:
            report.added += 1

    def _problem(self, cid, key, st, problem, row, report, retry=False, digest="") -> None:
        report.problems.append((key, problem))
        if retry and row and not row.problem:
            return  # keep the version indexed before: the next pass sees the new mtime and tries again
        # size -1 makes the next pass try again (a file that was busy); otherwise the file is skipped until it
        # changes, so an encrypted PDF costs one sentence, not a re-read, on every pass.
        self.store.put_file(cid, key, -1 if retry else st.st_size, st.st_mtime_ns, digest, problem=problem)
        if not row:
            report.added += 1

    # --- the vector pass --------------------------------------------------------------------------------
    def embed_missing(self, cid: int, report: IndexReport) -> None:
        """Vectors for the collection's chunks that have none from this embedder yet."""
        if self.embedder is None:
            return
        model = self.embedder.model
        total = self.store.count_missing_vectors(cid, model)
        phase_start, done, after = time.monotonic(), 0, 0
        while done < total:
            if self._should_stop():
                report.cancelled = True
                return
            batch = self.store.missing_vectors(cid, model, EMBED_BATCH, after)
            if not batch:
                break
            after = batch[-1][0]
            self._report("vectors", done, total, report.chunks, phase_start, done / total, "")
            vectors = self.embedder.embed([text for _, text in batch])
            self.store.put_vectors([cid_ for cid_, _ in batch], vectors, model)
            done += len(batch)
            report.embedded += len(batch)
        self._report("vectors", total, total, report.chunks, phase_start, 1.0, "")

    # --- helpers --------------------------------------------------------------------------------------------
    def _should_stop(self) -> bool:
        while self.gate is not None and not self.gate.is_set() and not self.cancel.is_set():
            self.gate.wait(0.1)  # held while the chat model generates; a cancel still ends the wait
        return self.cancel.is_set()

    def _report(self, phase, done, total, chunks, phase_start, fraction, current) -> None:
        if self.progress is None:
            return
        elapsed = time.monotonic() - phase_start
        eta = elapsed / fraction * (1 - fraction) if fraction > 0.02 and elapsed > 0.5 else None
        self.progress(IndexProgress(phase, done, total, chunks, time.monotonic() - self._started, eta, current))


def read_whole(path: Path, before: os.stat_result) -> tuple[bytes, bool]:
    """The file's bytes, and whether it changed while they were read (its size or mtime moved, or it is not
    the file that was walked)."""
    with open(path, "rb") as f:
        # One byte more than the walk saw, at most: a file that grew since is "changed", never read without end.
        data = f.read(before.st_size + 1)
        after = os.fstat(f.fileno())
    changed = (len(data) != after.st_size or after.st_size != before.st_size
               or after.st_mtime_ns != before.st_mtime_ns or after.st_ino != before.st_ino)
    return data, changed


def walk(root: Path, problems: list[tuple[str, str]]) -> Iterator[tuple[Path, os.stat_result]]:
    """Regular files under root (or root itself), following links to folders once each: a link back up the tree
    (a loop) or a second way into a folder already walked is said once and not followed. Hidden entries
    (.git, .cache) are skipped."""
    try:
        st = os.stat(root)
    except OSError as exc:
        problems.append((display_path(root), f"{display_path(root)} cannot be read ({exc.strerror or exc})."))
        return
    if stat.S_ISREG(st.st_mode):
        yield root, st
        return
    visited: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            fst = os.stat(folder)
        except OSError as exc:
            problems.append((display_path(folder), f"{display_path(folder)} cannot be read "
                             f"({exc.strerror or exc}); its files were left out."))
            continue
        if (fst.st_dev, fst.st_ino) in visited:
            problems.append((display_path(folder), f"{display_path(folder)} leads to a folder already indexed "
                             "(a symlink loop?); it was not followed."))
            continue
        visited.add((fst.st_dev, fst.st_ino))
        try:
            with os.scandir(folder) as entries:
                names = sorted(entries, key=lambda e: e.name)
        except OSError as exc:
            problems.append((display_path(folder), f"{display_path(folder)} cannot be read "
                             f"({exc.strerror or exc}); its files were left out."))
            continue
        subfolders = []
        for entry in names:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                est = os.stat(path)  # follows links
            except OSError as exc:
                why = "is a link to nothing" if entry.is_symlink() else f"cannot be read ({exc.strerror or exc})"
                problems.append((display_path(path), f"{display_path(path)} {why}; it was left out."))
                continue
            if stat.S_ISDIR(est.st_mode):
                subfolders.append(path)
            elif stat.S_ISREG(est.st_mode):
                yield path, est
        stack.extend(reversed(subfolders))
