"""The API's stored responses (OpenAI's Responses API with `store`, its default): each response with the input
items it answered and the output items it gave, in one SQLite file, so that a later request continues it by
`previous_response_id` and a client reads it back (`GET /v1/responses/{id}`, its input items) or deletes it.

A response keeps only its own turn (its input and its output) and the id of the one it continued: a
conversation is read back by walking that chain in one recursive query, so storing a long chain costs each
turn once, not the whole conversation again per turn. The store is bounded in count and age (oldest first);
a chain whose older part was let go says which response is missing.

The stores' rule (app/core/store/sqlite_rule.py): a lock held elsewhere is "busy", never damage; a damaged file is
moved aside once and a fresh one started (a stored response is a convenience for clients, not the user's
writing, so nothing is copied out of it); a folder that cannot hold the file keeps responses for this
session only. Each case is said once in `notice`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError
from app.core.store.sqlite_rule import busy, damaged, move_aside, open_checked

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    previous_id TEXT,
    created REAL NOT NULL,
    input TEXT NOT NULL,     -- JSON: the input items this response answered (with their ids)
    output TEXT NOT NULL,    -- JSON: its output items
    response TEXT NOT NULL   -- JSON: the response object as the API returned it
);
CREATE INDEX IF NOT EXISTS responses_by_created ON responses(created);
PRAGMA user_version = 1;
"""

BUSY_TIMEOUT_S = 5.0
MAX_CHAIN = 10_000  # responses a conversation may be read back through
# Characters of stored items a conversation may read back: far more than a request body may carry (10 MB by
# default), so that no chain of stored turns, each one small enough, adds up to more memory than that.
MAX_CONVERSATION_CHARS = 64 * 2**20
_CHAIN = ("WITH RECURSIVE chain(id, previous_id, depth) AS ("
          " SELECT id, previous_id, 0 FROM responses WHERE id = ?"
          " UNION ALL SELECT r.id, r.previous_id, c.depth + 1 FROM responses r JOIN chain c ON r.id = c.previous_id"
          " WHERE c.depth < ?) ")
DEFAULT_MAX_RESPONSES = 10_000
DEFAULT_MAX_AGE_DAYS = 30.0  # as OpenAI keeps a stored response


class ResponseStoreError(HearthError):
    """The store cannot be read or written now (busy, a full disk); the request may be retried."""


class BrokenChain(HearthError):
    """A response continues one that is no longer stored."""

    def __init__(self, missing: str, message: str):
        super().__init__(message)
        self.missing = missing


class ResponseStore:
    def __init__(self, path: Path | str | None = None, max_responses: int = DEFAULT_MAX_RESPONSES,
                 max_age_days: float = DEFAULT_MAX_AGE_DAYS, busy_timeout: float = BUSY_TIMEOUT_S):
        self.path = Path(path) if path else paths.responses_db()
        self.max_responses, self.max_age_s = max_responses, max_age_days * 86400
        self.busy_timeout = busy_timeout
        self.notice: str | None = None
        self._lock = threading.Lock()  # one connection, shared by the server's worker threads
        try:
            self.db = open_checked(self.path, SCHEMA, busy_timeout, check_same_thread=False)
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

    @staticmethod
    def _memory() -> sqlite3.Connection:
        db = sqlite3.connect(":memory:", check_same_thread=False)
        db.executescript(SCHEMA)
        return db

    def _fresh(self, error: Exception) -> sqlite3.Connection:
        try:
            aside = move_aside(self.path)
            db = open_checked(self.path, SCHEMA, self.busy_timeout, check_same_thread=False)
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
        """Keep a response (its id, previous_response_id and created_at are read from it), then let the oldest
        go past the bounds."""
        row = (response["id"], response.get("previous_response_id"), float(response.get("created_at") or time.time()),
               json.dumps(input_items, ensure_ascii=False), json.dumps(output_items, ensure_ascii=False),
               json.dumps(response, ensure_ascii=False))

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute("INSERT OR REPLACE INTO responses (id, previous_id, created, input, output, response) "
                           "VALUES (?, ?, ?, ?, ?, ?)", row)
                self._prune(db)
        self._run(write)

    def _prune(self, db: sqlite3.Connection) -> None:
        db.execute("DELETE FROM responses WHERE created < ?", (time.time() - self.max_age_s,))
        db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY created DESC, rowid DESC "
                   "LIMIT -1 OFFSET ?)", (max(self.max_responses, 0),))

    def delete(self, response_id: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            with db:
                return db.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0
        return self._run(write)

    # --- reading ---------------------------------------------------------
    def get(self, response_id: str) -> dict | None:
        row = self._run(lambda db: db.execute("SELECT response FROM responses WHERE id = ?",
                                              (response_id,)).fetchone())
        return json.loads(row[0]) if row else None

    def input_items(self, response_id: str) -> list[dict] | None:
        row = self._run(lambda db: db.execute("SELECT input FROM responses WHERE id = ?", (response_id,)).fetchone())
        return json.loads(row[0]) if row else None

    def conversation(self, response_id: str) -> list[dict] | None:
        """Every input and output item of the chain that ends with this response, oldest first; None when the
        response is not stored. Raises BrokenChain when an older response of it was let go, HearthError for a
        chain longer than MAX_CHAIN."""
        # Its shape and size first, without its text: a chain too long or too big is refused before it is read.
        shape = self._run(lambda db: db.execute(
            _CHAIN + "SELECT c.previous_id, c.depth, length(r.input) + length(r.output) FROM chain c "
            "JOIN responses r ON r.id = c.id ORDER BY c.depth DESC", (response_id, MAX_CHAIN)).fetchall())
        if not shape:
            return None
        oldest_previous, depth = shape[0][0], shape[0][1]
        if oldest_previous is not None:
            if depth >= MAX_CHAIN:
                raise HearthError(f"The conversation of '{response_id}' is longer than {MAX_CHAIN:,} responses; "
                                  "start a new one with the input it needs.")
            raise BrokenChain(oldest_previous, f"'{response_id}' continues '{oldest_previous}', which is no longer "
                              f"stored (this server keeps {self.max_responses:,} responses for "
                              f"{self.max_age_s / 86400:g} days); send the conversation as input instead.")
        if sum(size for _, _, size in shape) > MAX_CONVERSATION_CHARS:
            raise HearthError(f"The conversation of '{response_id}' holds more than {MAX_CONVERSATION_CHARS:,} "
                              "characters; start a new one with the input it needs.")
        rows = self._run(lambda db: db.execute(
            _CHAIN + "SELECT r.input, r.output FROM chain c JOIN responses r ON r.id = c.id ORDER BY c.depth DESC",
            (response_id, MAX_CHAIN)).fetchall())
        items: list[dict] = []
        for given, output in rows:
            items += json.loads(given) + json.loads(output)
        return items

    def count(self) -> int:
        return self._run(lambda db: db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
