"""The stores' one rule for SQLite files (app/core/store/sqlite_rule.py), tested directly, and each store that follows
it: busy is never damage, extended corruption codes are damage, and a newer Hearth's file is refused unwritten."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from app.core.chats.store import ChatStore, ChatStoreError
from app.core.store.sqlite_rule import TooNew, busy, damaged, open_checked, schema_version

SCHEMA = "CREATE TABLE IF NOT EXISTS t (x INTEGER);\nPRAGMA user_version = 3;\n"


def newer_file(path, version: int = 99) -> str:
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE future (y TEXT)")
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_schema_declares_its_version_once():
    assert schema_version(SCHEMA) == 3 and schema_version("CREATE TABLE a (b);") == 0


def test_a_file_of_a_newer_hearth_is_refused_in_a_sentence_and_left_as_it_was(tmp_path):
    path = tmp_path / "store.sqlite3"
    before = newer_file(path)
    with pytest.raises(TooNew) as raised:
        open_checked(path, SCHEMA, 1.0)
    assert "newer version of Hearth" in str(raised.value) and "format 99" in str(raised.value)
    assert "reads up to 3" in str(raised.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not busy(raised.value) and not damaged(raised.value)


def test_the_same_or_an_older_version_opens(tmp_path):
    path = tmp_path / "store.sqlite3"
    newer_file(path, 2)
    db = open_checked(path, SCHEMA, 1.0)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    db.close()


def test_extended_codes_count_by_their_primary_code():
    class Coded(sqlite3.DatabaseError):
        def __init__(self, code):
            super().__init__("x")
            self.sqlite_errorcode = code

    assert busy(Coded(sqlite3.SQLITE_BUSY | (2 << 8)))  # SQLITE_BUSY_SNAPSHOT
    assert damaged(Coded(sqlite3.SQLITE_CORRUPT | (1 << 8)))  # SQLITE_CORRUPT_VTAB
    assert not damaged(Coded(sqlite3.SQLITE_BUSY)) and not busy(Coded(sqlite3.SQLITE_CORRUPT))


def test_the_chat_history_of_a_newer_hearth_is_kept_for_it(tmp_path):
    path = tmp_path / "chats.sqlite3"
    before = newer_file(path)
    with pytest.raises(ChatStoreError, match="newer version of Hearth"):
        ChatStore(path, recover=False)
    store = ChatStore(path)  # the window: chats for this session only, and the sentence
    assert store.in_memory and "newer version of Hearth" in store.notice and "this session only" in store.notice
    store.create("Here")
    store.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert list(tmp_path.iterdir()) == [path]  # not moved aside as damage


def test_the_documents_index_of_a_newer_hearth_is_refused(tmp_path):
    from app.docs.store import DocsIndexError, Store

    path = tmp_path / "docs.sqlite3"
    before = newer_file(path)
    with pytest.raises(DocsIndexError, match="newer version of Hearth"):
        Store(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
