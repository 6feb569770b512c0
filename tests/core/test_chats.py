"""The SQLite chat store: conversations survive reopening, search, edit-and-resend cuts."""

from __future__ import annotations

import pytest

from app.core.chats import DEFAULT_TITLE, ChatStore, ChatStoreError, title_from


def test_conversations_survive_reopening(tmp_path):
    db = tmp_path / "chats.sqlite3"
    store = ChatStore(db)
    cid = store.create(system_prompt="Be brief.")
    store.add_message(cid, "user", "What is a GGUF file?")
    store.add_message(cid, "assistant", "A model file format.", {"gen_tok_s": 80.0})
    store.rename(cid, "  GGUF   question ")
    store.close()

    again = ChatStore(db)
    [conv] = again.list()
    assert conv.title == "GGUF question" and conv.system_prompt == "Be brief."
    msgs = again.messages(cid)
    assert [(m.role, m.content) for m in msgs] == [("user", "What is a GGUF file?"),
                                                   ("assistant", "A model file format.")]
    assert msgs[1].meta == {"gen_tok_s": 80.0}


def test_search_matches_titles_and_message_text_and_deletion(tmp_path):
    store = ChatStore(tmp_path / "c.db")
    a = store.create("Recipes")
    b = store.create("Travel")
    store.add_message(b, "user", "Trains from Lyon to 100% Turin?")
    assert [c.id for c in store.list("recip")] == [a]
    assert [c.id for c in store.list("lyon")] == [b]
    assert [c.id for c in store.list("100%")] == [b]
    assert store.list("nothing like this") == []
    # Most recently updated first.
    assert [c.id for c in store.list()] == [b, a]
    store.delete(b)
    assert [c.id for c in store.list()] == [a]
    assert store.messages(b) == []


def test_truncate_from_drops_the_message_and_what_follows(tmp_path):
    store = ChatStore(tmp_path / "c.db")
    cid = store.create()
    ids = [store.add_message(cid, role, text) for role, text in
           [("user", "one"), ("assistant", "1"), ("user", "two"), ("assistant", "2")]]
    store.truncate_from(cid, ids[2])
    assert [m.content for m in store.messages(cid)] == ["one", "1"]
    store.update_message(ids[1], "one!", {"finish_reason": "stop"})
    assert store.messages(cid)[1].content == "one!"


def test_titles_from_first_message():
    assert title_from("  hello\n world ") == "hello world"
    assert title_from("") == DEFAULT_TITLE
    long = title_from("word " * 40)
    assert long.endswith("…") and len(long) <= 49


def test_a_corrupt_database_is_one_clear_error(tmp_path):
    bad = tmp_path / "chats.sqlite3"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ChatStoreError, match="cannot be opened"):
        ChatStore(bad)
