"""The API's stored responses (OpenAI's Responses API with `store`, its default): each response with the input
items it answered and the output items it gave, in one SQLite file, so that a later request continues it by
`previous_response_id` and a client reads it back (`GET /v1/responses/{id}`, its input items) or deletes it.

A response keeps only its own turn (its input and its output) and the id of the one it continued: a
conversation is read back by walking that chain in one recursive query, so storing a long chain costs each
turn once, not the whole conversation again per turn. Its input items are rows of their own, so that a page of
them (`GET .../input_items`) is an index lookup, however many a response has.

The store is bounded in count, bytes and age (oldest first), and each bound is its writer's: several servers
may share one data folder, each with its own bounds, so each process lets go only of what it wrote, and of
what a process that has ended left behind (app/core/process_owner.py); never of what another running one still
keeps. A chain whose older part was let go says which response is missing.

The stores' rule (app/core/store/sqlite_rule.py): a lock held elsewhere is "busy", never damage; a damaged file is
moved aside once and a fresh one started (a stored response is a convenience for clients, not the user's
writing, so nothing is copied out of it); a folder that cannot hold the file keeps responses for this
session only, in memory, under a smaller bound in bytes. Each case is said once in `notice`.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError
from app.core.store.process_owner import owner_alive, owner_of
from app.core.store.sqlite_rule import busy, damaged, move_aside, open_checked
from app.server.options import ServeOptions

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    previous_id TEXT,
    created REAL NOT NULL,
    input TEXT NOT NULL,     -- JSON: version 1's input items; '[]' since they are rows of input_items
    output TEXT NOT NULL,    -- JSON: its output items
    response TEXT NOT NULL   -- JSON: the response object as the API returned it, less its output
);
CREATE INDEX IF NOT EXISTS responses_by_created ON responses(created);
CREATE TABLE IF NOT EXISTS input_items (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,    -- its place in the response's input
    id TEXT NOT NULL,        -- the item's id: unique in its response, so a page can start after it
    item TEXT NOT NULL,      -- JSON: the item
    PRIMARY KEY (response_id, seq)  -- a rowid table: an item may be megabytes, which WITHOUT ROWID pages badly
);
CREATE UNIQUE INDEX IF NOT EXISTS input_items_by_id ON input_items(response_id, id);
PRAGMA user_version = 2;
"""
# Version 2's columns, added to a version 1 file (CREATE TABLE IF NOT EXISTS leaves an old table as it is).
_COLUMNS = {"writer": "TEXT",  # the process that stored it (process_owner): each prunes its own
            "size": "INTEGER NOT NULL DEFAULT 0"}  # bytes of its JSON, what the bound in bytes counts

BUSY_TIMEOUT_S = 5.0
MAX_CHAIN = 10_000  # responses a conversation may be read back through
# Bytes of stored turns a conversation may read back: more than a request body may carry (10 MB by default), and
# far more text than any model's context holds (a million tokens is about 4 MB), so that no chain of stored turns,
# each one small enough, adds up to more memory than that. The server also bounds what the conversations read at
# once hold together (app/server/responses/endpoints.py).
MAX_CONVERSATION_BYTES = 16 * 2**20
_CHAIN = ("WITH RECURSIVE chain(id, previous_id, depth) AS ("
          " SELECT id, previous_id, 0 FROM responses WHERE id = ?"
          " UNION ALL SELECT r.id, r.previous_id, c.depth + 1 FROM responses r JOIN chain c ON r.id = c.previous_id"
          " WHERE c.depth < ?) ")
# The store's bounds by default: hearth serve's (--keep-responses, --keep-responses-days, --keep-responses-mb).
DEFAULT_MAX_RESPONSES = ServeOptions.keep_responses
DEFAULT_MAX_AGE_DAYS = ServeOptions.keep_responses_days
DEFAULT_MAX_BYTES = ServeOptions.keep_responses_bytes
MEMORY_MAX_BYTES = 64 * 2**20  # the session-only store (a folder that cannot hold the file) takes at most this


class ResponseStoreError(HearthError):
    """The store cannot be read or written now (busy, a full disk); the request may be retried."""


class TooBigToStore(HearthError):
    """One response is bigger than the whole store may be."""


class BrokenChain(HearthError):
    """A response continues one that is no longer stored."""

    def __init__(self, missing: str, message: str):
        super().__init__(message)
        self.missing = missing


class ResponseStore:
    def __init__(self, path: Path | str | None = None, max_responses: int = DEFAULT_MAX_RESPONSES,
                 max_age_days: float = DEFAULT_MAX_AGE_DAYS, busy_timeout: float = BUSY_TIMEOUT_S,
                 max_bytes: int = DEFAULT_MAX_BYTES):
        self.path = Path(path) if path else paths.responses_db()
        self.max_responses, self.max_age_s, self.max_bytes = max_responses, max_age_days * 86400, max_bytes
        self.busy_timeout = busy_timeout
        self.notice: str | None = None
        self.writer = owner_of()
        self._gone: set[str] = set()  # writers seen ended: what they stored is this one's to let go
        self._lock = threading.Lock()  # one connection, shared by the server's worker threads
        try:
            self.db = self._open(self.path)
        except sqlite3.DatabaseError as exc:
            if busy(exc):
                self.notice = (f"The stored responses at {self.path} are busy (another Hearth server holds them); "
                               "responses are kept for this session only.")
                self.db = self._memory()
            elif damaged(exc):
                self.db = self._fresh(exc)
            else:
                self.notice = (f"The stored responses at {self.path} cannot be used ({exc}); responses are kept "
                               "for this session only.")
                self.db = self._memory()

    def _open(self, path: Path) -> sqlite3.Connection:
        db = open_checked(path, SCHEMA, self.busy_timeout, check_same_thread=False)
        try:
            _upgrade(db)
        except BaseException:
            db.close()
            raise
        return db

    def _memory(self) -> sqlite3.Connection:
        db = sqlite3.connect(":memory:", check_same_thread=False)
        db.execute("PRAGMA foreign_keys = ON")
        db.executescript(SCHEMA)
        _upgrade(db)
        self.max_bytes = min(self.max_bytes, MEMORY_MAX_BYTES)  # memory, not disk: a smaller bound
        return db

    def _fresh(self, error: Exception) -> sqlite3.Connection:
        try:
            aside = move_aside(self.path)
            db = self._open(self.path)
        except (OSError, sqlite3.DatabaseError) as exc:
            self.notice = (f"The stored responses at {self.path} are damaged ({error}) and cannot be replaced "
                           f"({exc}); responses are kept for this session only.")
            return self._memory()
        self.notice = (f"The stored responses were damaged ({error}); the file was moved to {aside.name} and a "
                       "fresh store started.")
        return db

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def _run(self, work):
        """work(db) under the connection's lock; a busy lock or a full disk is a ResponseStoreError."""
        with self._lock:
            try:
                return work(self.db)
            except sqlite3.DatabaseError as exc:
                if busy(exc):
                    raise ResponseStoreError(f"The stored responses at {self.path} are busy; try again.") from None
                raise ResponseStoreError(f"The stored responses at {self.path} cannot be used ({exc}).") from None

    # --- writing ---------------------------------------------------------
    def put(self, response: dict, input_items: list[dict], output_items: list[dict]) -> None:
        """Keep a response (its id, previous_response_id and created_at are read from it), then let the oldest of
        this writer's go past the bounds. The input items' ids must be strings, unique in the response (the API
        checks them: app/server/responses/request.py). Raises TooBigToStore for one past the bound in bytes."""
        items = [(i, item["id"], json.dumps(item, ensure_ascii=False)) for i, item in enumerate(input_items)]
        output = json.dumps(output_items, ensure_ascii=False)
        kept = json.dumps({**response, "output": []}, ensure_ascii=False)  # its output is in `output` already
        size = sum(len(text.encode("utf-8", "surrogatepass")) for text in (output, kept, *(t for _, _, t in items)))
        if size > self.max_bytes:
            raise TooBigToStore(f"it takes {size:,} bytes, more than the {self.max_bytes:,} the stored responses "
                                "may take (--keep-responses-mb)")
        row = (response["id"], response.get("previous_response_id"), float(response.get("created_at") or time.time()),
               "[]", output, kept, self.writer, size)

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute("DELETE FROM responses WHERE id = ?", (row[0],))  # its input items go with it
                db.execute("INSERT INTO responses (id, previous_id, created, input, output, response, writer, size) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
                db.executemany("INSERT INTO input_items (response_id, seq, id, item) VALUES (?, ?, ?, ?)",
                               ((row[0], seq, item_id, text) for seq, item_id, text in items))
                self._prune(db)
        self._run(write)

    def _prune(self, db: sqlite3.Connection) -> None:
        """Let go of the oldest past each bound, among what this writer stored and what ended writers left."""
        others = self._running_writers(db)
        mine = f"(writer IS NULL OR writer = ? OR writer NOT IN ({','.join('?' * len(others))}))"
        scope = (self.writer, *others)
        db.execute(f"DELETE FROM responses WHERE created < ? AND {mine}", (time.time() - self.max_age_s, *scope))
        db.execute(f"DELETE FROM responses WHERE id IN (SELECT id FROM responses WHERE {mine} "
                   "ORDER BY created DESC, rowid DESC LIMIT -1 OFFSET ?)", (*scope, max(self.max_responses, 0)))
        db.execute(f"DELETE FROM responses WHERE rowid IN (SELECT rowid FROM (SELECT rowid, SUM(size) OVER "
                   f"(ORDER BY created DESC, rowid DESC) AS total FROM responses WHERE {mine}) WHERE total > ?)",
                   (*scope, self.max_bytes))

    def _running_writers(self, db: sqlite3.Connection) -> list[str]:
        """The other writers of this file whose processes still run."""
        writers = [w for (w,) in db.execute("SELECT DISTINCT writer FROM responses WHERE writer IS NOT NULL")]
        running = []
        for writer in writers:
            if writer == self.writer or writer in self._gone:
                continue
            if owner_alive(writer):
                running.append(writer)
            else:
                self._gone.add(writer)  # an ended process does not come back
        return running

    def delete(self, response_id: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            with db:
                return db.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0
        return self._run(write)

    # --- reading ---------------------------------------------------------
    def get(self, response_id: str) -> dict | None:
        row = self._run(lambda db: db.execute("SELECT response, output FROM responses WHERE id = ?",
                                              (response_id,)).fetchone())
        if row is None:
            return None
        return {**json.loads(row[0]), "output": json.loads(row[1])}

    def input_items(self, response_id: str) -> list[dict] | None:
        """Every input item of a response, in order; None when it is not stored."""
        page = self.input_page(response_id, limit=None)
        return None if page is None else page[0]

    def input_page(self, response_id: str, limit: int | None, descending: bool = False, after: str | None = None,
                   before: str | None = None) -> tuple[list[dict], bool] | None:
        """(a page of a response's input items, whether more follow it) in the order asked, starting after the item
        `after` and ending before `before` (ids); None when the response is not stored. Raises KeyError(name) for
        an after or before that is not one of its items."""
        def read(db: sqlite3.Connection):
            if db.execute("SELECT 1 FROM responses WHERE id = ?", (response_id,)).fetchone() is None:
                return None
            where, args = ["response_id = ?"], [response_id]
            for name, mark, later in (("after", after, True), ("before", before, False)):
                if mark is None:
                    continue
                found = db.execute("SELECT seq FROM input_items WHERE response_id = ? AND id = ?",
                                   (response_id, mark)).fetchone()
                if found is None:
                    raise KeyError(name)
                where.append("seq > ?" if later != descending else "seq < ?")
                args.append(found[0])
            order = "DESC" if descending else "ASC"
            rows = db.execute(f"SELECT item FROM input_items WHERE {' AND '.join(where)} ORDER BY seq {order}"
                              + (" LIMIT ?" if limit is not None else ""),
                              (*args, *([limit + 1] if limit is not None else []))).fetchall()
            return rows
        rows = self._run(read)
        if rows is None:
            return None
        more = limit is not None and len(rows) > limit
        return [json.loads(text) for (text,) in rows[:limit]], more

    def conversation_size(self, response_id: str) -> int | None:
        """The bytes the chain that ends with this response holds, known before any of it is read; None when the
        response is not stored. Raises BrokenChain when an older response of it was let go, HearthError for a
        chain longer than MAX_CHAIN or bigger than MAX_CONVERSATION_BYTES."""
        shape = self._run(lambda db: db.execute(
            _CHAIN + "SELECT c.previous_id, c.depth, r.size FROM chain c "
            "JOIN responses r ON r.id = c.id ORDER BY c.depth DESC", (response_id, MAX_CHAIN)).fetchall())
        if not shape:
            return None
        oldest_previous, depth = shape[0][0], shape[0][1]
        if oldest_previous is not None:
            if depth >= MAX_CHAIN:
                raise HearthError(f"The conversation of '{response_id}' is longer than {MAX_CHAIN:,} responses; "
                                  "start a new one with the input it needs.")
            raise BrokenChain(oldest_previous, f"'{response_id}' continues '{oldest_previous}', which is no longer "
                              f"stored (this server keeps {self.max_responses:,} responses, at most "
                              f"{self.max_bytes / 2**20:g} MB, for {self.max_age_s / 86400:g} days); send the "
                              "conversation as input instead.")
        size = sum(size for _, _, size in shape)
        if size > MAX_CONVERSATION_BYTES:
            raise HearthError(f"The conversation of '{response_id}' holds more than {MAX_CONVERSATION_BYTES:,} "
                              "bytes; start a new one with the input it needs.")
        return size

    def conversation(self, response_id: str) -> list[dict] | None:
        """Every input and output item of the chain that ends with this response, oldest first; None when the
        response is not stored. Raises what conversation_size raises, before anything is read."""
        if self.conversation_size(response_id) is None:
            return None
        rows = self._run(lambda db: db.execute(
            _CHAIN + "SELECT c.depth, 0 AS part, i.seq, i.item FROM chain c JOIN input_items i ON i.response_id = c.id"
            " UNION ALL SELECT c.depth, 1, 0, r.output FROM chain c JOIN responses r ON r.id = c.id"
            " ORDER BY 1 DESC, 2, 3", (response_id, MAX_CHAIN)).fetchall())
        items: list[dict] = []
        for _, part, _, text in rows:
            if part == 0:
                items.append(json.loads(text))
            else:
                items += json.loads(text)
        return items

    def count(self) -> int:
        return self._run(lambda db: db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def bytes_kept(self) -> int:
        return self._run(lambda db: db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()[0])


def _upgrade(db: sqlite3.Connection) -> None:
    """A table of version 1 (or one just made) to version 2: the writer and size columns, and the input items as
    rows of their own."""
    have = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
    if all(name in have for name in _COLUMNS):
        return
    with db:
        for name, kind in _COLUMNS.items():
            if name not in have:
                db.execute(f"ALTER TABLE responses ADD COLUMN {name} {kind}")
        db.execute("CREATE INDEX IF NOT EXISTS responses_by_writer ON responses(writer)")
        for rid, given in db.execute("SELECT id, input FROM responses WHERE input != '[]'").fetchall():
            db.executemany("INSERT INTO input_items (response_id, seq, id, item) VALUES (?, ?, ?, ?)",
                           ((rid, seq, item["id"], json.dumps(item, ensure_ascii=False))
                            for seq, item in enumerate(_unique_ids(json.loads(given)))))
        db.execute("UPDATE responses SET input = '[]', size = length(CAST(output AS BLOB)) + "
                   "length(CAST(response AS BLOB)) + COALESCE((SELECT SUM(length(CAST(item AS BLOB))) FROM "
                   "input_items WHERE response_id = responses.id), 0)")


def _unique_ids(items: list) -> list[dict]:
    """Version 1 kept a client's item ids as given (any JSON, repeated): each becomes a string of its own."""
    seen: set[str] = set()
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        item_id = item.get("id")
        if not isinstance(item_id, str) or item_id in seen:
            item = {**item, "id": f"item_{secrets.token_hex(16)}"}
        seen.add(item["id"])
        out.append(item)
    return out
