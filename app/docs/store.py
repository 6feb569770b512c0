"""The documents' index: one SQLite file in the data folder (app.core.paths.docs_index).

A collection holds files; a file holds chunks (text, page, heading, character span); FTS5 indexes the chunks'
text for BM25 (porter stemming, so "indexing" finds "indexed"); a chunk may have a vector from the embedding
model. A file's chunks, vectors and row are replaced in one transaction, so an index that was cancelled or
crashed mid-way holds each file whole, either as it was or as it is now.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where vectors are used: the window imports this module before it paints
    import numpy as np

from app.core import paths
from app.core.errors import HearthError
from app.core.store.sqlite_rule import TooNew, damaged, open_checked
from app.docs.chunker import Chunk

SCHEMA = """
PRAGMA foreign_keys = ON;
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created REAL NOT NULL
);
-- The folders and files a collection was given: re-indexing walks them again.
CREATE TABLE IF NOT EXISTS roots (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    PRIMARY KEY (collection_id, path)
);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL DEFAULT '',
    chars INTEGER NOT NULL DEFAULT 0,
    problem TEXT,                    -- why it gave no chunks (one sentence), or NULL
    indexed REAL NOT NULL,
    UNIQUE (collection_id, path)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    page INTEGER,
    heading TEXT,
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_file ON chunks(file_id, ord);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, heading, content='chunks', content_rowid='id', tokenize='porter unicode61');
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text, heading) VALUES (new.id, new.text, coalesce(new.heading, ''));
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text, heading) VALUES ('delete', old.id, old.text, coalesce(old.heading, ''));
END;
CREATE TABLE IF NOT EXISTS vectors (
    chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    v BLOB NOT NULL                  -- float32, unit length
);
-- The collections a window chat answers from (chats live in chats.sqlite3; a chat's id names it here).
CREATE TABLE IF NOT EXISTS chat_collections (
    conversation_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (conversation_id, name)
);
-- An indexer's run under way, by its process: a row whose process is gone is a run that was interrupted (a
-- crash, a kill, a power cut), said at the next start; a run that ends in any way, cancelled too, removes it.
CREATE TABLE IF NOT EXISTS indexing (
    collection_id INTEGER PRIMARY KEY REFERENCES collections(id) ON DELETE CASCADE,
    pid INTEGER NOT NULL,
    since REAL NOT NULL
);
PRAGMA user_version = 1;
"""
# An indexer in another process writes in long transactions: a reader or a second writer waits this long for it.
BUSY_TIMEOUT_S = 30.0
# BM25 with the text weighted above the heading. Ordered by the function itself, not by FTS5's configured
# `rank`: ORDER BY rank runs FTS5's own sorter (a nested query per statement), which took 125 ms for 56,000
# matches at 100,000 chunks where SQLite's top-N sort over the same bm25() took 89, with the same order.
BM25 = "bm25(chunks_fts, 1.0, 0.5)"


class DocsIndexError(HearthError):
    """The index cannot be opened or written."""


@dataclass
class FileRow:
    id: int
    path: str
    size: int
    mtime_ns: int
    sha256: str
    problem: str | None
    chunks: int = 0


@dataclass
class CollectionInfo:
    name: str
    roots: list[str]
    files: int
    chunks: int
    vectors: int
    problems: int
    created: float


class Store:
    def __init__(self, path: Path | str | None = None):
        # ":memory:" is an index for one chat's attachments (app/docs/attach.py); anything else is a file.
        self.path = ":memory:" if path == ":memory:" else Path(path) if path else paths.docs_index()
        self.read_only = False
        try:
            if self.path == ":memory:":
                self.db = sqlite3.connect(":memory:", check_same_thread=False)
                self.db.executescript(SCHEMA)
            else:  # the stores' one rule (app/core/store/sqlite_rule.py): WAL, quick_check, a newer Hearth's file refused
                self.db = open_checked(self.path, SCHEMA, BUSY_TIMEOUT_S, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            self.db = self._open_read_only(exc)
        self._matrices: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._version = 0  # bumped on every write, so cached vector matrices are rebuilt after one

    def _open_read_only(self, exc: sqlite3.DatabaseError) -> sqlite3.Connection:
        """An index that cannot be written (a read-only or full disk) still lists and searches: opened read-only.
        Only SQLite's word that the file is not a database, or is malformed, makes it damage."""
        from app.core.store import disk_errors
        if isinstance(exc, TooNew):
            raise DocsIndexError(f"The documents' index {exc}") from None
        if damaged(exc):
            raise DocsIndexError(f"The documents' index {self.path} is damaged ({exc}); move it aside and add the "
                                 "folders again.") from None
        if self.path == ":memory:" or not Path(self.path).exists() or Path(self.path).stat().st_size == 0:
            raise DocsIndexError(f"The documents' index could not be made in {Path(self.path).parent}: "
                                 f"{disk_errors.describe(self.path, exc)}.") from None
        self.why_read_only = disk_errors.describe(self.path, exc)
        uri = Path(self.path).resolve().as_uri()
        # mode=ro needs the write-ahead log's shared-memory file or a folder to make it in; immutable does not, and
        # on a disk nothing can write to, nothing changes the file under it.
        for query in ("?mode=ro", "?immutable=1"):
            try:
                db = sqlite3.connect(uri + query, uri=True, timeout=30, check_same_thread=False)
                db.execute("SELECT count(*) FROM collections").fetchone()
                self.read_only = True
                return db
            except sqlite3.DatabaseError:
                continue
        raise DocsIndexError(f"The documents' index {self.path} cannot be opened: {self.why_read_only}.") from None

    def writable(self) -> None:
        """DocsIndexError, said in one sentence, where the index was opened read-only."""
        if self.read_only:
            raise DocsIndexError(f"The documents' index {self.path} can be searched but not changed: "
                                 f"{self.why_read_only}; the index itself is intact.")


    def close(self) -> None:
        self.db.close()

    # --- collections ------------------------------------------------------------------------------------
    def collection_id(self, name: str, create: bool = False) -> int | None:
        row = self.db.execute("SELECT id FROM collections WHERE name = ?", (name,)).fetchone()
        if row:
            return row[0]
        if not create:
            return None
        with self.db:
            return self.db.execute("INSERT INTO collections (name, created) VALUES (?, ?)",
                                   (name, time.time())).lastrowid

    def add_root(self, collection_id: int, path: str) -> None:
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO roots (collection_id, path) VALUES (?, ?)", (collection_id, path))

    def roots(self, collection_id: int) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT path FROM roots WHERE collection_id = ? ORDER BY path",
                                              (collection_id,))]

    def collections(self) -> list[CollectionInfo]:
        out = []
        for cid, name, created in self.db.execute("SELECT id, name, created FROM collections ORDER BY name").fetchall():
            files, problems = self.db.execute(
                "SELECT count(*), count(problem) FROM files WHERE collection_id = ?", (cid,)).fetchone()
            chunks, vectors = self.db.execute(
                "SELECT count(c.id), count(v.chunk_id) FROM chunks c JOIN files f ON f.id = c.file_id "
                "LEFT JOIN vectors v ON v.chunk_id = c.id WHERE f.collection_id = ?", (cid,)).fetchone()
            out.append(CollectionInfo(name, self.roots(cid), files, chunks, vectors, problems, created))
        return out

    def begin_run(self, collection_id: int) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO indexing (collection_id, pid, since) VALUES (?, ?, ?)",
                            (collection_id, os.getpid(), time.time()))

    def end_run(self, collection_id: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM indexing WHERE collection_id = ?", (collection_id,))

    def interrupted(self) -> list[str]:
        """The collections whose last indexing run never ended: its process is gone."""
        import psutil

        rows = self.db.execute("SELECT c.name, i.pid FROM indexing i JOIN collections c ON c.id = i.collection_id "
                               "ORDER BY c.name").fetchall()
        return [name for name, pid in rows if pid != os.getpid() and not psutil.pid_exists(pid)]

    def remove_collection(self, name: str) -> bool:
        self.writable()
        cid = self.collection_id(name)
        if cid is None:
            return False
        with self.db:
            self.db.execute("DELETE FROM chunks WHERE file_id IN (SELECT id FROM files WHERE collection_id = ?)",
                            (cid,))
            self.db.execute("DELETE FROM collections WHERE id = ?", (cid,))
            self.db.execute("DELETE FROM chat_collections WHERE name = ?", (name,))
        self._changed()
        if self.path != ":memory:":
            # The removed text leaves the file (and the write-ahead log), not just the index.
            self.db.execute("VACUUM")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return True

    def chat_collections(self, conversation_id: int) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT name FROM chat_collections WHERE conversation_id = ? "
                                              "ORDER BY name", (conversation_id,))]

    def set_chat_collections(self, conversation_id: int, names: list[str]) -> None:
        with self.db:
            self.db.execute("DELETE FROM chat_collections WHERE conversation_id = ?", (conversation_id,))
            self.db.executemany("INSERT INTO chat_collections (conversation_id, name) VALUES (?, ?)",
                                [(conversation_id, n) for n in dict.fromkeys(names)])

    # --- files --------------------------------------------------------------------------------------------
    def files(self, collection_id: int) -> dict[str, FileRow]:
        rows = self.db.execute(
            "SELECT f.id, f.path, f.size, f.mtime_ns, f.sha256, f.problem, count(c.id) FROM files f "
            "LEFT JOIN chunks c ON c.file_id = f.id WHERE f.collection_id = ? GROUP BY f.id", (collection_id,))
        return {r[1]: FileRow(*r[:6], chunks=r[6]) for r in rows}

    def problems(self, collection_id: int) -> list[tuple[str, str]]:
        return self.db.execute("SELECT path, problem FROM files WHERE collection_id = ? AND problem IS NOT NULL "
                               "ORDER BY path", (collection_id,)).fetchall()

    def touch(self, file_id: int, size: int, mtime_ns: int) -> None:
        """The same bytes under a new mtime (a copy, a `touch`): remembered so the next walk skips hashing."""
        with self.db:
            self.db.execute("UPDATE files SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, file_id))

    def put_file(self, collection_id: int, path: str, size: int, mtime_ns: int, sha256: str, kind: str = "",
                 chars: int = 0, chunks: list[Chunk] = (), problem: str | None = None) -> int:
        """Replace a file's row and chunks at once (its old chunks' vectors go with them)."""
        with self.db:
            self.db.execute("DELETE FROM chunks WHERE file_id IN (SELECT id FROM files WHERE collection_id = ? "
                            "AND path = ?)", (collection_id, path))
            self.db.execute("DELETE FROM files WHERE collection_id = ? AND path = ?", (collection_id, path))
            fid = self.db.execute(
                "INSERT INTO files (collection_id, path, size, mtime_ns, sha256, kind, chars, problem, indexed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (collection_id, path, size, mtime_ns, sha256, kind, chars, problem, time.time())).lastrowid
            self.db.executemany("INSERT INTO chunks (file_id, ord, start, end, page, heading, text) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                                [(fid, i, c.start, c.end, c.page, c.heading, c.text) for i, c in enumerate(chunks)])
        self._changed()
        return fid

    def remove_file(self, collection_id: int, path: str) -> None:
        with self.db:
            self.db.execute("DELETE FROM chunks WHERE file_id IN (SELECT id FROM files WHERE collection_id = ? "
                            "AND path = ?)", (collection_id, path))
            self.db.execute("DELETE FROM files WHERE collection_id = ? AND path = ?", (collection_id, path))
        self._changed()

    def missing_vectors(self, collection_id: int, model: str, limit: int, after: int = 0) -> list[tuple[int, str]]:
        """(chunk id, text) of chunks after chunk id `after` that have no vector from model yet, by id (the caller
        passes the last id it got, so each batch reads on from there instead of scanning the index again)."""
        return self.db.execute(
            "SELECT c.id, c.text FROM chunks c JOIN files f ON f.id = c.file_id LEFT JOIN vectors v ON "
            "v.chunk_id = c.id AND v.model = ? WHERE f.collection_id = ? AND v.chunk_id IS NULL AND c.id > ? "
            "ORDER BY c.id LIMIT ?", (model, collection_id, after, limit)).fetchall()

    def count_missing_vectors(self, collection_id: int, model: str) -> int:
        return self.db.execute(
            "SELECT count(*) FROM chunks c JOIN files f ON f.id = c.file_id LEFT JOIN vectors v ON "
            "v.chunk_id = c.id AND v.model = ? WHERE f.collection_id = ? AND v.chunk_id IS NULL",
            (model, collection_id)).fetchone()[0]

    def put_vectors(self, chunk_ids: list[int], vectors: np.ndarray, model: str) -> None:
        """Vectors for chunks; a chunk whose file was replaced meanwhile is gone and gets none."""
        import numpy as np

        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO vectors (chunk_id, model, v) SELECT ?, ?, ? WHERE EXISTS "
                "(SELECT 1 FROM chunks WHERE id = ?)",
                [(cid, model, np.asarray(v, dtype=np.float32).tobytes(), cid) for cid, v in zip(chunk_ids, vectors)])
        self._changed()

    def _changed(self) -> None:
        self._version += 1
        self._matrices.clear()

    # --- reading -----------------------------------------------------------------------------------------
    def chunk(self, chunk_id: int) -> dict | None:
        row = self.db.execute(
            "SELECT c.id, f.path, c.page, c.heading, c.start, c.end, c.text, col.name FROM chunks c "
            "JOIN files f ON f.id = c.file_id JOIN collections col ON col.id = f.collection_id WHERE c.id = ?",
            (chunk_id,)).fetchone()
        if not row:
            return None
        keys = ("chunk_id", "path", "page", "heading", "start", "end", "text", "collection")
        return dict(zip(keys, row))

    def bm25(self, fts_query: str, collection_ids: list[int], limit: int) -> list[int]:
        """Chunk ids best first by FTS5's BM25 (text weighted above headings).

        FTS5 ranks inside its own table fastest (ORDER BY bm25() LIMIT: no join per matching row), so the best
        few hundred are taken from the whole index and then kept to the collections asked for; only when that
        leaves too few (the collections are a small part of the index) is the slower joined query run."""
        if not fts_query or not collection_ids:
            return []
        marks = ",".join("?" * len(collection_ids))
        keep = (f"SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.collection_id IN ({marks}) "
                f"AND c.id IN ")
        top = self.db.execute(f"SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY {BM25} LIMIT ?",
                              (fts_query, limit * 8)).fetchall()
        ids = [r[0] for r in top]
        if ids:
            inside = {r[0] for r in self.db.execute(keep + f"({','.join('?' * len(ids))})", (*collection_ids, *ids))}
            found = [i for i in ids if i in inside][:limit]
            if len(found) == limit or len(ids) < limit * 8:
                return found
        rows = self.db.execute(
            f"SELECT chunks_fts.rowid FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
            f"JOIN files f ON f.id = c.file_id WHERE chunks_fts MATCH ? AND f.collection_id IN ({marks}) "
            f"ORDER BY {BM25} LIMIT ?", (fts_query, *collection_ids, limit))
        return [r[0] for r in rows]

    def chunk_count(self) -> int:
        if getattr(self, "_counted", None) is None or self._counted[0] != self._version:
            self._counted = (self._version, self.db.execute("SELECT count(*) FROM chunks").fetchone()[0])
        return self._counted[1]

    def matches(self, fts_query: str) -> int:
        """How many chunks an FTS5 query matches (in the whole index)."""
        return self.db.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (fts_query,)).fetchone()[0]

    def vector_matrix(self, collection_ids: list[int], model: str) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, unit vectors as rows) of the collections' chunks embedded by model; kept until a write."""
        import numpy as np

        key = (tuple(sorted(collection_ids)), model)
        if key not in self._matrices:
            marks = ",".join("?" * len(collection_ids))
            rows = self.db.execute(
                f"SELECT v.chunk_id, v.v FROM vectors v JOIN chunks c ON c.id = v.chunk_id JOIN files f ON "
                f"f.id = c.file_id WHERE f.collection_id IN ({marks}) AND v.model = ? ORDER BY v.chunk_id",
                (*collection_ids, model)).fetchall() if collection_ids else []
            ids = np.array([r[0] for r in rows], dtype=np.int64)
            matrix = (np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                      if rows else np.zeros((0, 0), dtype=np.float32))
            self._matrices[key] = (ids, matrix)
        return self._matrices[key]

    def size_bytes(self) -> int:
        if self.path == ":memory:":
            return 0
        return sum(p.stat().st_size for p in (Path(f"{self.path}{s}") for s in ("", "-wal", "-shm")) if p.exists())
