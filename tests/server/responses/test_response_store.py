"""The API's stored responses (app/server/responses/store.py) on a real SQLite file: chains read back oldest first,
bounds in count, bytes and age, each writer's own (two processes on one file never take each other's), input
items paged by their ids, and the stores' rule: a lock held elsewhere is busy, never damage; a damaged file is
moved aside once, never written into."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from app.server.responses.store import (MEMORY_MAX_BYTES, BrokenChain, ResponseStore, ResponseStoreError,
                                     TooBigToStore)


def _turn(store: ResponseStore, rid: str, previous: str | None, created: float | None = None) -> None:
    store.put({"id": rid, "previous_response_id": previous, "created_at": created or time.time()},
              [{"type": "message", "id": f"q-{rid}", "role": "user", "content": f"q {rid}"}],
              [{"type": "message", "id": f"a-{rid}", "role": "assistant", "content": f"a {rid}"}])


def test_a_chain_reads_back_oldest_first(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite3")
    _turn(store, "r1", None)
    _turn(store, "r2", "r1")
    _turn(store, "r3", "r2")
    assert [i["id"] for i in store.conversation("r3")] == ["q-r1", "a-r1", "q-r2", "a-r2", "q-r3", "a-r3"]
    assert store.conversation("missing") is None
    assert store.input_items("r2") == [{"type": "message", "id": "q-r2", "role": "user", "content": "q r2"}]
    assert store.delete("r1") and not store.delete("r1")
    with pytest.raises(BrokenChain) as err:
        store.conversation("r3")
    assert err.value.missing == "r1" and "'r1'" in str(err.value)


def test_the_oldest_go_first_past_the_count_and_the_age(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite3", max_responses=3, max_age_days=1)
    _turn(store, "old", None, created=time.time() - 2 * 86400)
    for i in range(5):
        _turn(store, f"r{i}", None, created=time.time() + i)
    assert store.count() == 3 and store.get("old") is None and store.get("r1") is None
    assert store.get("r4")["id"] == "r4"


def test_a_locked_file_is_busy_and_never_moved(tmp_path):
    path = tmp_path / "r.sqlite3"
    store = ResponseStore(path, busy_timeout=0.2)
    _turn(store, "r1", None)
    other = sqlite3.connect(path)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ResponseStoreError, match="busy"):
            _turn(store, "r2", None)
        again = ResponseStore(path, busy_timeout=0.2)  # opening while it is locked: this session only, said
        assert again.notice and "busy" in again.notice
    finally:
        other.rollback()
        other.close()
    assert sorted(p.name for p in tmp_path.iterdir() if "damaged" in p.name) == []
    assert store.get("r1")["id"] == "r1"


def test_a_damaged_file_is_moved_aside_once(tmp_path):
    path = tmp_path / "r.sqlite3"
    path.write_bytes(b"this is no database" * 100)
    store = ResponseStore(path)
    aside = [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == b"this is no database" * 100
    assert store.notice and aside[0].name in store.notice
    _turn(store, "r1", None)
    assert ResponseStore(path).get("r1")["id"] == "r1"


def test_a_conversation_too_big_to_read_back_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """Each turn small enough, a long chain of them could add up past any memory: the chain's size is summed in
    SQL, and a conversation past MAX_CONVERSATION_CHARS is one sentence, not read."""
    from app.server.responses import store as response_store
    from app.core.errors import HearthError

    store = ResponseStore(tmp_path / "r.sqlite3")
    _turn(store, "r1", None)
    _turn(store, "r2", "r1")
    (first,) = store.db.execute("SELECT size FROM responses WHERE id = 'r1'").fetchone()
    monkeypatch.setattr(response_store, "MAX_CONVERSATION_BYTES", first)  # r1 alone fits; r1 and r2 do not
    with pytest.raises(HearthError, match="holds more than"):
        store.conversation("r2")
    assert [i["id"] for i in store.conversation("r1")] == ["q-r1", "a-r1"]


def _other_process(path, *lines: str) -> None:
    """Run store calls in another process (another writer of the same file), until it ends."""
    code = "\n".join(["import time", "from app.server.responses.store import ResponseStore", *lines])
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_writer_never_lets_go_of_what_another_running_one_keeps(tmp_path):
    """Issue 56 A2: server B (--keep-responses 3) answered three requests and all five of server A's were gone."""
    path = tmp_path / "r.sqlite3"
    a = ResponseStore(path, max_responses=10)
    for i in range(5):
        _turn(a, f"a{i}", f"a{i - 1}" if i else None)
    _other_process(path, f"b = ResponseStore({str(path)!r}, max_responses=3, max_bytes=10_000)",
                   *[f"b.put({{'id': 'b{i}', 'created_at': time.time()}}, [], [])" for i in range(5)],
                   "assert b.count() == 5 + 3, b.count()")  # its own bound, on its own: A's five stay
    assert [i["id"] for i in a.conversation("a4")][:2] == ["q-a0", "a-a0"]
    assert a.count() == 8
    # B has ended: what it left is A's to let go now, under A's own bound.
    small = ResponseStore(path, max_responses=6)
    _turn(small, "a5", "a4")
    kept = {row[0] for row in small.db.execute("SELECT id FROM responses")}
    assert kept == {"a3", "a4", "b2", "b3", "b4", "a5"}  # the newest six of A's and B's


def test_the_store_is_bounded_in_bytes_oldest_first(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite3", max_bytes=40_000)
    for i in range(10):
        store.put({"id": f"r{i}", "created_at": time.time() + i},
                  [{"type": "message", "id": f"q{i}", "role": "user", "content": "x" * 9000}], [])
    assert store.bytes_kept() <= 40_000 and store.count() == 4
    assert store.get("r9") and store.get("r5") is None
    with pytest.raises(TooBigToStore):
        store.put({"id": "huge"}, [{"type": "message", "id": "q", "role": "user", "content": "x" * 50_000}], [])
    assert store.get("huge") is None and store.get("r9")


def test_the_session_only_store_is_bounded_too(tmp_path):
    """A folder that cannot hold the file keeps responses in memory: under MEMORY_MAX_BYTES at most."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the data folder should be")
    store = ResponseStore(blocker / "r.sqlite3", max_bytes=10 * 2**30)
    assert store.notice and "this session only" in store.notice
    assert store.max_bytes == MEMORY_MAX_BYTES
    chunk = "x" * (4 * 2**20)
    for i in range(MEMORY_MAX_BYTES // len(chunk) + 4):
        store.put({"id": f"r{i}", "created_at": time.time() + i}, [{"type": "message", "id": "q", "content": chunk}],
                  [])
    assert MEMORY_MAX_BYTES - len(chunk) - 1000 <= store.bytes_kept() <= MEMORY_MAX_BYTES


def test_input_items_page_by_their_ids_and_every_page_advances(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite3")
    items = [{"type": "reasoning", "id": f"rs_{i}", "summary": []} for i in range(200_000)]
    store.put({"id": "big"}, items, [])
    seen, after = [], None
    started = time.monotonic()
    for _ in range(3):
        page, more = store.input_page("big", 100, descending=True, after=after)
        seen += [i["id"] for i in page]
        after = page[-1]["id"]
    assert time.monotonic() - started < 1.0  # an index lookup a page, not the whole input read back
    assert seen == [f"rs_{i}" for i in range(199_999, 199_699, -1)] and more
    assert store.input_page("big", 5, after="rs_199997") == ([items[199_998], items[199_999]], False)
    assert store.input_page("big", 2, before="rs_3") == ([items[0], items[1]], True)
    with pytest.raises(KeyError):
        store.input_page("big", 5, after="no-such-item")
    assert store.input_page("missing", 5) is None


def test_a_store_of_the_first_version_is_upgraded_with_ids_made_unique(tmp_path):
    path = tmp_path / "r.sqlite3"
    old = sqlite3.connect(path)
    old.executescript("CREATE TABLE responses (id TEXT PRIMARY KEY, previous_id TEXT, created REAL NOT NULL, "
                      "input TEXT NOT NULL, output TEXT NOT NULL, response TEXT NOT NULL); PRAGMA user_version = 1;")
    given = [{"type": "message", "id": "same", "content": "one"}, {"type": "message", "id": "same", "content": "two"},
             {"type": "message", "id": 5, "content": "three"}]
    old.execute("INSERT INTO responses VALUES ('r1', NULL, ?, ?, '[]', ?)",
                (time.time(), json.dumps(given), json.dumps({"id": "r1", "output": []})))
    old.commit()
    old.close()
    store = ResponseStore(path)
    assert store.notice is None
    items = store.input_items("r1")
    assert [i["content"] for i in items] == ["one", "two", "three"]
    ids = [i["id"] for i in items]
    assert ids[0] == "same" and len(set(ids)) == 3 and all(isinstance(i, str) for i in ids)
    assert [i["content"] for i in store.conversation("r1")] == ["one", "two", "three"]
    assert store.get("r1") == {"id": "r1", "output": []} and store.bytes_kept() > 0
