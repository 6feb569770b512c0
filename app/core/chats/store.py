"""Conversations kept in one SQLite file (no Qt; the GUI and tests share it).

A conversation has a title, a system prompt and an ordered list of messages.
Regenerate and edit-and-resend keep what they replace: a message can have
versions (message_versions), each with the messages that followed it (its
tail). Showing another version puts that version's text and tail back, so
paging through answers (< 2/3 >), regenerating an earlier answer and editing
an earlier question lose nothing: a tail message keeps its own versions (and
their tails) inside the tail, so a branch comes back whole. A message without
versions has no rows there: chats saved before versions existed read as they
were, and tails saved before tails kept versions read as single versions.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError
from app.core.store.sqlite_rule import TooNew, busy as _busy, damaged as _damaged, move_aside, open_checked

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
-- Schema 2: a message's versions; the one shown is also the message row (meta "version" says which).
-- The tail is the messages that followed that version, as JSON [{role, content, meta}].
CREATE TABLE IF NOT EXISTS message_versions (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    content TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    tail TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS versions_by_message ON message_versions(message_id, id);
-- Schema 3: the MCP servers whose tools a chat may use (app/tools), by their names in mcp.json. A history
-- from before has no rows: its chats use no tools. An answer's calls and results live in its meta
-- ("tool_calls", see tool_turn_messages), so its versions and branches carry them.
CREATE TABLE IF NOT EXISTS chat_tools (
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    server TEXT NOT NULL,
    PRIMARY KEY (conversation_id, server)
);
-- Schema 4: an answer while it streams (app/core/chats/answer_saving.py), one row per answer, rewritten about twice a
-- second, so that a crash of the window costs at most the last second of it. `kind` says what the answer becomes
-- when it ends: 'new' (a message after the question), 'version' (a new version of message `target`, a regenerated
-- answer) or 'continue' (message `target`'s text, continued). The row goes in the transaction that saves the
-- answer; a row whose owner (pid and start time) is gone is an interrupted answer, saved as such at the next start.
CREATE TABLE IF NOT EXISTS answer_drafts (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    target INTEGER,
    content TEXT NOT NULL DEFAULT '',
    meta TEXT NOT NULL DEFAULT '{}',
    owner TEXT NOT NULL,
    updated REAL NOT NULL
);
-- Schema 5: the images and sounds attached to questions (#53), each kept once by its content hash, however many
-- messages, versions or chats carry it. A message's meta "media" lists [{digest, kind, name}] in the order
-- attached; the bytes are here, never base64 inside the text. A medium no message refers to any more is pruned
-- when a chat is deleted (prune_media).
CREATE TABLE IF NOT EXISTS media (
    digest TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    data BLOB NOT NULL,
    created REAL NOT NULL
);
PRAGMA user_version = 5;
"""

MEDIA = "media"  # a user message's meta key: [{digest, kind, name}], its images and sounds in order

DEFAULT_TITLE = "New chat"
TITLE_CHARS = 48


class ChatStoreError(HearthError):
    """The chat database cannot be opened or written."""


@dataclass
class Message:
    id: int
    role: str
    content: str
    meta: dict = field(default_factory=dict)
    versions: int = 1  # how many versions the message has (regenerated answers, edited questions)

    @property
    def version(self) -> int:
        """Which version is shown, 1-based."""
        return int(self.meta.get("version", self.versions))


@dataclass
class Conversation:
    id: int
    title: str
    system_prompt: str
    updated: float


def _copy_readable(source: Path, target: sqlite3.Connection) -> tuple[int, int]:
    """Copy what can be read of a damaged store: (conversations saved whole, conversations found)."""
    try:
        old = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    except sqlite3.DatabaseError:
        return 0, 0
    saved = total = 0
    try:
        try:
            conversations = old.execute("SELECT id, title, system_prompt, created, updated FROM conversations").fetchall()
        except sqlite3.DatabaseError:
            return 0, 0
        total = len(conversations)
        for row in conversations:
            try:
                messages = old.execute("SELECT id, conversation_id, role, content, meta, created FROM messages "
                                       "WHERE conversation_id = ? ORDER BY id", (row[0],)).fetchall()
            except sqlite3.DatabaseError:
                continue  # its messages sit on damaged pages
            try:  # the messages' earlier versions (schema 2); a history from before them has none
                versions = old.execute(
                    "SELECT message_id, content, meta, tail, created FROM message_versions WHERE message_id IN "
                    "(SELECT id FROM messages WHERE conversation_id = ?) ORDER BY id", (row[0],)).fetchall()
            except sqlite3.DatabaseError:
                versions = []
            with target:
                target.execute("INSERT INTO conversations (id, title, system_prompt, created, updated) "
                               "VALUES (?, ?, ?, ?, ?)", row)
                # The same ids, so that the versions still belong to their messages.
                target.executemany("INSERT INTO messages (id, conversation_id, role, content, meta, created) "
                                   "VALUES (?, ?, ?, ?, ?, ?)", messages)
                target.executemany("INSERT INTO message_versions (message_id, content, meta, tail, created) "
                                   "VALUES (?, ?, ?, ?, ?)", versions)
                target.executemany("INSERT INTO chat_tools (conversation_id, server) VALUES (?, ?)",
                                   [(row[0], name) for name in _readable_tools(old, row[0])])
            saved += 1
        _copy_readable_media(old, target)
    finally:
        old.close()
    return saved, total


def _copy_readable_media(old: sqlite3.Connection, target: sqlite3.Connection) -> None:
    """The images and sounds that can still be read (schema 5), one by one: a damaged page costs its own only."""
    try:
        digests = [r[0] for r in old.execute("SELECT digest FROM media")]
    except sqlite3.DatabaseError:
        return
    for digest in digests:
        try:
            row = old.execute("SELECT digest, kind, name, data, created FROM media WHERE digest = ?",
                              (digest,)).fetchone()
        except sqlite3.DatabaseError:
            continue
        if row is not None and hashlib.sha256(bytes(row[3])).hexdigest() == digest:  # damaged bytes are not kept
            with target:
                target.execute("INSERT OR IGNORE INTO media (digest, kind, name, data, created) "
                               "VALUES (?, ?, ?, ?, ?)", row)


def _readable_tools(old: sqlite3.Connection, conversation_id: int) -> list[str]:
    try:  # schema 3; a history from before has none
        return [r[0] for r in old.execute("SELECT server FROM chat_tools WHERE conversation_id = ?",
                                          (conversation_id,))]
    except sqlite3.DatabaseError:
        return []


def _meta(text: str | None) -> dict:
    try:
        parsed = json.loads(text) if text else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _without_version(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k != "version"}


def answer_model(meta: dict) -> dict:
    """Which model wrote an answer, from its meta: {"model": its name, "model_path": the local file} or
    {"model": ..., "endpoint": the server it ran on}; {} for an answer saved before answers were signed."""
    return {k: meta[k] for k in ("model", "model_path", "endpoint") if isinstance(meta.get(k), str) and meta[k]}


def remembered_model(messages: list[Message]) -> dict:
    """The model of a conversation: the one that wrote its latest signed answer ({} if none did)."""
    for msg in reversed(messages):
        if msg.role == "assistant" and answer_model(msg.meta).get("model"):
            return answer_model(msg.meta)
    return {}


def tool_turn_messages(content: str, meta: dict) -> list[dict]:
    """An answer as the model's conversation has it: with tool calls (meta "tool_calls", the CallRecords of
    app/tools/tool_chat.py), each round's assistant message with its calls and a tool message per result,
    then the answer's own text; without, the answer alone."""
    calls = [c for c in meta.get("tool_calls") or [] if isinstance(c, dict) and c.get("tool")]
    if not calls:
        return [{"role": "assistant", "content": content}]
    out: list[dict] = []
    rounds: dict[int, list[dict]] = {}
    for call in calls:
        rounds.setdefault(int(call.get("round") or 0), []).append(call)
    for number in sorted(rounds):
        group = rounds[number]
        ids = [c.get("id") or f"call_{number}_{i}" for i, c in enumerate(group)]
        out.append({"role": "assistant", "content": group[0].get("said") or "", "tool_calls": [
            {"id": i, "type": "function", "function": {"name": c["tool"], "arguments": json.dumps(
                c.get("arguments") or {}, ensure_ascii=False)}} for i, c in zip(ids, group)]})
        out += [{"role": "tool", "tool_call_id": i, "name": c["tool"], "content": str(c.get("result") or "")}
                for i, c in zip(ids, group)]
    if content:  # an answer stopped after its calls has no words of its own
        out.append({"role": "assistant", "content": content})
    return out


def title_from(text: str) -> str:
    """A conversation title from its first user message: the first line, shortened at a word."""
    line = " ".join(text.strip().split())
    if len(line) <= TITLE_CHARS:
        return line or DEFAULT_TITLE
    cut = line[:TITLE_CHARS].rsplit(" ", 1)[0] or line[:TITLE_CHARS]
    return cut + "…"


# How long opening or writing waits for another connection's lock (a second Hearth busy with a big import, a
# backup tool, a DB browser) before saying the history is busy.
BUSY_TIMEOUT_S = 5.0


class ChatStoreBusy(ChatStoreError):
    """Another program holds the chat database's lock past the wait: busy, never damage."""


class ChatStore:
    def __init__(self, path: Path | str | None = None, recover: bool = True, busy_timeout: float = BUSY_TIMEOUT_S):
        """recover: a damaged file is moved aside and what SQLite can still read of it is copied into a
        fresh one (`notice` says so); without it a damaged file raises ChatStoreError. A database another
        program holds locked for longer than busy_timeout is never treated as damage: without recover it
        raises ChatStoreBusy; with it, chats are kept for this session only and `notice` says why."""
        self.path = Path(path) if path else paths.chats_db()
        self.busy_timeout = busy_timeout
        self.notice: str | None = None  # what happened to a damaged or unusable history, for the window
        self.in_memory = False  # chats kept for this session only: no other connection can reach them
        try:
            self.db = self._open(self.path, busy_timeout)
        except sqlite3.DatabaseError as exc:
            if _busy(exc):
                busy = self._busy_error()
                if not recover:
                    raise busy from None
                self.notice = f"{busy} Until then, chats are kept for this session only."
                self.db = self._memory()
            elif isinstance(exc, TooNew):  # a newer Hearth's history: never written by this one
                if not recover:
                    raise ChatStoreError(f"The chat history at {exc}") from None
                self.notice = f"The chat history at {exc} Until then, chats are kept for this session only."
                self.db = self._memory()
            elif not recover:
                raise ChatStoreError(f"The chat history at {self.path} cannot be opened ({exc}).") from None
            elif _damaged(exc):
                self.db = self._recover(exc)
            else:  # a folder that cannot hold it, a read-only or full disk: the file (if any) stays untouched
                self.notice = (f"The chat history at {self.path} cannot be used ({exc}). Chats are kept "
                               "for this session only.")
                self.db = self._memory()

    def _busy_error(self) -> ChatStoreBusy:
        return ChatStoreBusy(f"The chat history at {self.path} is busy: another Hearth window, or another "
                             "program (a backup tool, a database browser), holds it. Close it and try again.")

    def _memory(self) -> sqlite3.Connection:
        self.in_memory = True
        db = sqlite3.connect(":memory:")
        db.execute("PRAGMA foreign_keys = ON")
        db.executescript(SCHEMA)
        return db

    @staticmethod
    def _open(path: Path, busy_timeout: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
        return open_checked(path, SCHEMA, busy_timeout)

    def _recover(self, error: Exception) -> sqlite3.Connection:
        """Keep the damaged file aside, start a fresh store, and copy into it every conversation and message
        that can still be read. Never writes into the damaged file."""
        try:
            aside = move_aside(self.path)
            db = self._open(self.path, self.busy_timeout)
        except (OSError, sqlite3.DatabaseError) as exc:
            # A read-only or full disk: chats work for this session only, and the user is told.
            self.notice = (f"The chat history at {self.path} cannot be used ({error}; {exc}). Chats are kept "
                           "for this session only.")
            return self._memory()
        saved, total = _copy_readable(aside, db)
        self.notice = (f"The chat history was damaged ({error}). It was moved to {aside.name}; "
                       f"{saved} of {total} conversations could be recovered into a fresh history.")
        return db

    def close(self) -> None:
        self.db.close()

    def wait_for_locks(self, seconds: float) -> None:
        """How long a write waits for another program's lock before it says busy. The window waits only a
        moment: its writes run on the GUI thread, and an answer that cannot be saved yet is saved later by
        app/core/chats/answer_saving.py, on a thread of its own."""
        self.busy_timeout = seconds
        self.db.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    def sibling(self, busy_timeout: float = BUSY_TIMEOUT_S) -> "ChatStore":
        """Another connection to the same file, for another thread (SQLite connections stay on the thread that
        opened them). The file was opened and checked by this store: the sibling only connects."""
        if self.in_memory:
            raise ChatStoreError("Chats are kept for this session only; no other connection can reach them.")
        other = ChatStore.__new__(ChatStore)
        other.path, other.busy_timeout, other.notice, other.in_memory = self.path, busy_timeout, None, False
        try:
            other.db = sqlite3.connect(str(self.path), timeout=busy_timeout)
            other.db.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            raise ChatStoreError(f"The chat history at {self.path} cannot be opened ({exc}).") from None
        return other

    @contextmanager
    def _transaction(self):
        """One transaction: all of it is written, or (an error, said in one sentence) none of it."""
        try:
            with self.db:
                yield
        except sqlite3.DatabaseError as exc:
            if _busy(exc):  # waited busy_timeout for another program's lock: nothing was written, nothing damaged
                raise self._busy_error() from None
            raise ChatStoreError(f"The chat history at {self.path} cannot be written ({exc}).") from None

    def _write(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._transaction():
            return self.db.execute(sql, args)

    # --- conversations --------------------------------------------------
    def create(self, title: str = DEFAULT_TITLE, system_prompt: str = "") -> int:
        now = time.time()
        cur = self._write("INSERT INTO conversations (title, system_prompt, created, updated) VALUES (?, ?, ?, ?)",
                          (title, system_prompt, now, now))
        return int(cur.lastrowid)

    def get(self, conversation_id: int) -> Conversation | None:
        row = self.db.execute("SELECT id, title, system_prompt, updated FROM conversations WHERE id = ?",
                              (conversation_id,)).fetchone()
        return Conversation(*row) if row else None

    def rename(self, conversation_id: int, title: str) -> None:
        title = " ".join(title.split()) or DEFAULT_TITLE
        self._write("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def set_system_prompt(self, conversation_id: int, system_prompt: str) -> None:
        self._write("UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id))

    def delete(self, conversation_id: int) -> None:
        with self._transaction():
            self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            self._prune_media()

    # --- images and sounds (schema 5) -------------------------------------
    def keep_media(self, kind: str, name: str, data: bytes) -> dict:
        """The medium kept once by its SHA-256 (a second message with the same image adds nothing); returns the
        reference a message's meta carries: {digest, kind, name}."""
        digest = hashlib.sha256(data).hexdigest()
        self._write("INSERT OR IGNORE INTO media (digest, kind, name, data, created) VALUES (?, ?, ?, ?, ?)",
                    (digest, kind, name, sqlite3.Binary(data), time.time()))
        return {"digest": digest, "kind": kind, "name": name}

    def media_data(self, digest: str) -> bytes | None:
        row = self.db.execute("SELECT data FROM media WHERE digest = ?", (digest,)).fetchone()
        return bytes(row[0]) if row else None

    def media_count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM media").fetchone()[0])

    def _prune_media(self) -> None:
        """Drop the media no message, version or version tail refers to (inside a transaction; an answer draft is an
        answer, which carries none)."""
        self.db.execute(
            "DELETE FROM media WHERE digest NOT IN ("
            " SELECT json_extract(j.value, '$.digest') FROM messages, json_each(messages.meta, '$.media') j"
            " UNION SELECT json_extract(j.value, '$.digest') FROM message_versions v, json_each(v.meta, '$.media') j"
            " UNION SELECT json_extract(j.value, '$.digest') FROM message_versions v, json_each(v.tail) t,"
            "       json_each(t.value, '$.meta.media') j)")

    def list(self, search: str = "") -> list[Conversation]:
        """Most recently updated first; a search matches titles and message text."""
        if not search.strip():
            rows = self.db.execute("SELECT id, title, system_prompt, updated FROM conversations "
                                   "ORDER BY updated DESC, id DESC").fetchall()
        else:
            like = "%" + search.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self.db.execute(
                "SELECT id, title, system_prompt, updated FROM conversations c WHERE title LIKE ? ESCAPE '\\' "
                "OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE ? ESCAPE '\\') "
                "ORDER BY updated DESC, id DESC", (like, like)).fetchall()
        return [Conversation(*row) for row in rows]

    def chat_tools(self, conversation_id: int) -> list[str]:
        """The MCP servers whose tools this chat may use, by name."""
        return [r[0] for r in self.db.execute("SELECT server FROM chat_tools WHERE conversation_id = ? "
                                              "ORDER BY server", (conversation_id,))]

    def set_chat_tools(self, conversation_id: int, servers: list[str]) -> None:
        with self._transaction():
            self.db.execute("DELETE FROM chat_tools WHERE conversation_id = ?", (conversation_id,))
            self.db.executemany("INSERT OR IGNORE INTO chat_tools (conversation_id, server) VALUES (?, ?)",
                                [(conversation_id, name) for name in servers])

    # --- messages -------------------------------------------------------
    def add_message(self, conversation_id: int, role: str, content: str, meta: dict | None = None) -> int:
        with self._transaction():
            return self._add_message_rows(conversation_id, role, content, meta)

    def _add_message_rows(self, conversation_id: int, role: str, content: str, meta: dict | None) -> int:
        now = time.time()
        cur = self.db.execute("INSERT INTO messages (conversation_id, role, content, meta, created) "
                              "VALUES (?, ?, ?, ?, ?)", (conversation_id, role, content, json.dumps(meta or {}), now))
        self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
        return int(cur.lastrowid)

    def messages(self, conversation_id: int) -> list[Message]:
        rows = self.db.execute(
            "SELECT id, role, content, meta, (SELECT COUNT(*) FROM message_versions v WHERE v.message_id = m.id) "
            "FROM messages m WHERE conversation_id = ? ORDER BY id", (conversation_id,)).fetchall()
        return [Message(mid, role, content, _meta(meta), max(1, count)) for mid, role, content, meta, count in rows]

    def message(self, message_id: int) -> Message | None:
        row = self.db.execute(
            "SELECT id, role, content, meta, (SELECT COUNT(*) FROM message_versions v WHERE v.message_id = m.id) "
            "FROM messages m WHERE id = ?", (message_id,)).fetchone()
        return Message(row[0], row[1], row[2], _meta(row[3]), max(1, row[4])) if row else None

    # --- versions -------------------------------------------------------
    def add_version(self, message_id: int, content: str, meta: dict | None = None) -> int:
        """Replace the message by a new version (a regenerated answer, an edited question) and show it; the
        version it replaces keeps its text and the messages that followed it. Returns the new version (1-based)."""
        with self._transaction():
            return self._add_version_rows(message_id, content, meta)

    def _add_version_rows(self, message_id: int, content: str, meta: dict | None) -> int:
        """add_version's writes, inside the caller's transaction."""
        current = self._row(message_id)
        if current is None:
            raise ChatStoreError("That message is no longer in the chat history.")
        ids = self._version_ids(message_id)
        tail = self._take_tail(current)
        if not ids:
            self.db.execute("INSERT INTO message_versions (message_id, content, meta, tail, created) "
                            "VALUES (?, ?, ?, ?, ?)", (message_id, current["content"],
                                                        json.dumps(_without_version(current["meta"])),
                                                        json.dumps(tail), time.time()))
        else:
            shown = ids[min(len(ids), int(current["meta"].get("version", len(ids)))) - 1]
            self.db.execute("UPDATE message_versions SET content = ?, meta = ?, tail = ? WHERE id = ?",
                            (current["content"], json.dumps(_without_version(current["meta"])),
                             json.dumps(tail), shown))
        self.db.execute("INSERT INTO message_versions (message_id, content, meta, tail, created) "
                        "VALUES (?, ?, ?, '[]', ?)", (message_id, content,
                                                      json.dumps(_without_version(meta or {})), time.time()))
        number = len(ids or [0]) + 1
        self.db.execute("UPDATE messages SET content = ?, meta = ? WHERE id = ?",
                        (content, json.dumps({**(meta or {}), "version": number}), message_id))
        self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?",
                        (time.time(), current["conversation_id"]))
        return number

    def show_version(self, message_id: int, number: int) -> None:
        """Show version `number` (1-based) of a message, with the messages that followed it."""
        with self._transaction():
            current = self._row(message_id)
            ids = self._version_ids(message_id)
            if current is None or not ids or not 1 <= number <= len(ids):
                return
            shown = ids[min(len(ids), int(current["meta"].get("version", len(ids)))) - 1]
            tail = self._take_tail(current)
            self.db.execute("UPDATE message_versions SET content = ?, meta = ?, tail = ? WHERE id = ?",
                            (current["content"], json.dumps(_without_version(current["meta"])),
                             json.dumps(tail), shown))
            content, meta, kept = self.db.execute("SELECT content, meta, tail FROM message_versions WHERE id = ?",
                                                  (ids[number - 1],)).fetchone()
            self.db.execute("UPDATE messages SET content = ?, meta = ? WHERE id = ?",
                            (content, json.dumps({**_meta(meta), "version": number}), message_id))
            for item in json.loads(kept or "[]"):
                self._put_back(current["conversation_id"], item)

    def _row(self, message_id: int) -> dict | None:
        row = self.db.execute("SELECT conversation_id, content, meta FROM messages WHERE id = ?",
                              (message_id,)).fetchone()
        return {"id": message_id, "conversation_id": row[0], "content": row[1], "meta": _meta(row[2])} if row else None

    def _version_ids(self, message_id: int) -> list[int]:
        return [r[0] for r in self.db.execute("SELECT id FROM message_versions WHERE message_id = ? ORDER BY id",
                                              (message_id,))]

    def _take_tail(self, current: dict) -> list[dict]:
        """Remove the messages after this one and return them, as a version's tail: each with its own
        versions, so that a later answer's alternatives come back with the branch they belong to."""
        rows = self.db.execute("SELECT id, role, content, meta FROM messages WHERE conversation_id = ? AND id > ? "
                               "ORDER BY id", (current["conversation_id"], current["id"])).fetchall()
        tail = []
        for mid, role, content, meta in rows:
            item = {"role": role, "content": content, "meta": _meta(meta)}
            versions = self.db.execute("SELECT content, meta, tail FROM message_versions WHERE message_id = ? "
                                       "ORDER BY id", (mid,)).fetchall()
            if versions:
                item["versions"] = [{"content": c, "meta": _meta(m), "tail": json.loads(t or "[]")}
                                    for c, m, t in versions]
            else:
                item["meta"] = _without_version(item["meta"])
            tail.append(item)
        # Their versions go with them (ON DELETE CASCADE): they now live in the tail.
        self.db.execute("DELETE FROM messages WHERE conversation_id = ? AND id > ?",
                        (current["conversation_id"], current["id"]))
        return tail

    def _put_back(self, conversation_id: int, item: dict) -> None:
        """Insert a tail message again at the end of the conversation, with its versions."""
        now = time.time()
        cur = self.db.execute("INSERT INTO messages (conversation_id, role, content, meta, created) "
                              "VALUES (?, ?, ?, ?, ?)", (conversation_id, item["role"], item["content"],
                                                         json.dumps(item.get("meta") or {}), now))
        for version in item.get("versions") or []:
            self.db.execute("INSERT INTO message_versions (message_id, content, meta, tail, created) "
                            "VALUES (?, ?, ?, ?, ?)", (cur.lastrowid, version["content"],
                                                       json.dumps(version.get("meta") or {}),
                                                       json.dumps(version.get("tail") or []), now))

    def versions(self, message_id: int) -> list[dict]:
        """A message's versions [{content, meta, tail}] in order ([] for a message with one); the one shown is
        the message itself (its row here is rewritten whenever another is shown, and its tail is what follows)."""
        message = self.message(message_id)
        rows = self.db.execute("SELECT content, meta, tail FROM message_versions WHERE message_id = ? ORDER BY id",
                               (message_id,)).fetchall()
        out = [{"content": c, "meta": _meta(m), "tail": json.loads(t or "[]")} for c, m, t in rows]
        if message is not None and out:
            out[min(len(out), message.version) - 1] = {"content": message.content,
                                                      "meta": _without_version(message.meta), "tail": []}
        return out

    def restore(self, title: str, system_prompt: str, messages: list[dict]) -> int:
        """A conversation from an export: [{role, content, meta, versions?}] as versions() gives them, in one
        transaction (a bad file leaves no half chat). Returns its id."""
        with self._transaction():
            now = time.time()
            cid = int(self.db.execute("INSERT INTO conversations (title, system_prompt, created, updated) "
                                      "VALUES (?, ?, ?, ?)", (title, system_prompt, now, now)).lastrowid)
            for item in messages:
                self._put_back(cid, item)
        return cid

    def has_message(self, conversation_id: int, role: str) -> bool:
        """Whether the conversation has a message of this role, without reading them all (the chat's
        buttons ask on every state change; a 50,000-token chat took 13 ms to read)."""
        return self.db.execute("SELECT 1 FROM messages WHERE conversation_id = ? AND role = ? LIMIT 1",
                               (conversation_id, role)).fetchone() is not None

    def truncate_from(self, conversation_id: int, message_id: int) -> None:
        """Drop this message and everything after it (edit-and-resend, regenerate)."""
        self._write("DELETE FROM messages WHERE conversation_id = ? AND id >= ?", (conversation_id, message_id))

    # --- answers while they stream (app/core/chats/answer_saving.py owns when and what) -----------------------------
    def begin_draft(self, conversation_id: int, kind: str, target: int | None, content: str, meta: dict,
                    owner: str) -> int:
        cur = self._write("INSERT INTO answer_drafts (conversation_id, kind, target, content, meta, owner, updated) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)", (conversation_id, kind, target, content, json.dumps(meta),
                                                           owner, time.time()))
        return int(cur.lastrowid)

    def save_draft(self, draft_id: int, content: str) -> None:
        """The answer so far: one row, one small transaction."""
        self._write("UPDATE answer_drafts SET content = ?, updated = ? WHERE id = ?", (content, time.time(), draft_id))

    def drafts(self) -> list[dict]:
        rows = self.db.execute("SELECT id, conversation_id, kind, target, content, meta, owner FROM answer_drafts "
                               "ORDER BY id").fetchall()
        return [{"id": r[0], "conversation_id": r[1], "kind": r[2], "target": r[3], "content": r[4],
                 "meta": _meta(r[5]), "owner": r[6]} for r in rows]

    def commit_draft(self, draft_id: int, content: str, meta: dict) -> Message | None:
        """Save the answer as what its draft says it becomes, and drop the draft, in one transaction: a crash
        leaves either the draft or the answer, never both nor neither. The saved message, or None when nothing
        was saved: its chat was deleted, or it has no text (a new answer's error or tool calls are kept; a retry
        that failed before its first token leaves the answer it would have replaced)."""
        with self._transaction():
            row = self.db.execute("SELECT conversation_id, kind, target FROM answer_drafts WHERE id = ?",
                                  (draft_id,)).fetchone()
            self.db.execute("DELETE FROM answer_drafts WHERE id = ?", (draft_id,))
            if row is None or self.get(row[0]) is None:
                return None
            conversation, kind, target = row
            exists = target is not None and self._row(target) is not None
            if kind == "continue" and exists:
                self.db.execute("UPDATE messages SET content = ?, meta = ? WHERE id = ?",
                                (content, json.dumps(meta), target))
                saved = target
            elif kind == "version" and exists:
                if content or meta.get("tool_calls"):
                    self._add_version_rows(target, content, meta)
                saved = target
            elif content or meta.get("error") or meta.get("tool_calls"):
                saved = self._add_message_rows(conversation, "assistant", content, meta)
            else:
                return None
        return self.message(saved)
