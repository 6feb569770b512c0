"""The API's stored responses (app/server/response_store.py) on a real SQLite file: chains read back oldest first,
bounds in count and age, and the stores' rule: a lock held elsewhere is busy, never damage; a damaged file is
moved aside once, never written into."""

from __future__ import annotations

import sqlite3
import time

import pytest

from app.server.response_store import BrokenChain, ResponseStore, ResponseStoreError


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
    from app.server import response_store
    from app.core.errors import HearthError

    store = ResponseStore(tmp_path / "r.sqlite3")
    _turn(store, "r1", None)
    _turn(store, "r2", "r1")
    (first,) = store.db.execute("SELECT length(input) + length(output) FROM responses WHERE id = 'r1'").fetchone()
    monkeypatch.setattr(response_store, "MAX_CONVERSATION_CHARS", first)  # r1 alone fits; r1 and r2 do not
    with pytest.raises(HearthError, match="holds more than"):
        store.conversation("r2")
    assert [i["id"] for i in store.conversation("r1")] == ["q-r1", "a-r1"]
