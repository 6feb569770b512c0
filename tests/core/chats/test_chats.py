"""The SQLite chat store: conversations survive reopening, search, edit-and-resend cuts."""

from __future__ import annotations

import hashlib

import subprocess
import sys
import time

import pytest

from app.core.chats.store import (
    DEFAULT_TITLE,
    ChatStore,
    ChatStoreBusy,
    ChatStoreError,
    title_from,
)

# Another program (a second Hearth busy with an import, a backup tool, a DB browser) holding the write lock
# until told to let go on stdin.
HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
db.execute("INSERT INTO conversations (title, system_prompt, created, updated) VALUES ('by the holder', '', 0, 0)")
print("held", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


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


def test_titles_from_first_message():
    assert title_from("  hello\n world ") == "hello world"
    assert title_from("") == DEFAULT_TITLE
    long = title_from("word " * 40)
    assert long.endswith("…") and len(long) <= 49


def test_a_corrupt_database_is_one_clear_error(tmp_path):
    bad = tmp_path / "chats.sqlite3"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ChatStoreError, match="cannot be opened"):
        ChatStore(bad, recover=False)


def test_an_unreadable_file_is_moved_aside_and_a_fresh_history_starts(tmp_path):
    """#18 item 6: the window starts anyway; the damaged file is kept, never written into."""
    bad = tmp_path / "chats.sqlite3"
    junk = b"this is not sqlite" * 100
    bad.write_bytes(junk)
    store = ChatStore(bad)
    assert store.notice and "was damaged" in store.notice and "0 of 0 conversations" in store.notice
    kept = list(tmp_path.glob("chats.sqlite3.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == junk
    cid = store.create("after")
    store.add_message(cid, "user", "still works")
    store.close()
    assert ChatStore(bad).notice is None  # the fresh file is sound


def test_damage_inside_the_file_is_found_at_start_and_the_readable_chats_recovered(tmp_path):
    """#18 item 7: random bytes in the middle of a store that still opens."""
    path = tmp_path / "chats.sqlite3"
    store = ChatStore(path)
    for i in range(60):
        cid = store.create(f"chat {i}")
        for j in range(20):
            store.add_message(cid, "user", f"message {j} of chat {i} " + "x" * 200)
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4096] = bytes(range(256)) * 16  # one page of garbage in the middle
    path.write_bytes(bytes(data))

    store = ChatStore(path)
    assert store.notice and "was damaged" in store.notice
    recovered = store.list()
    assert 0 < len(recovered) <= 60
    assert f"{len(recovered)} of 60 conversations" in store.notice
    for conversation in recovered:  # what came back came back whole
        assert len(store.messages(conversation.id)) == 20
    assert list(tmp_path.glob("chats.sqlite3.damaged-*"))


def test_a_history_that_cannot_be_written_anywhere_keeps_chats_for_the_session(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = ChatStore(blocker / "chats.sqlite3")
    assert store.notice and "for this session only" in store.notice
    cid = store.create("kept in memory")
    assert [c.title for c in store.list()] == ["kept in memory"] and cid


def test_a_history_another_process_holds_locked_is_busy_and_never_moved_aside(tmp_path):
    """#48 C11: a lock held past the wait was taken for damage: the live file renamed, a fresh history
    started, and the user told it was damaged."""
    path = tmp_path / "chats.sqlite3"
    store = ChatStore(path)
    cid = store.create("mine")
    store.add_message(cid, "user", "hello")
    store.close()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        busy = ChatStore(path, busy_timeout=0.5)
        assert time.monotonic() - started >= 0.5  # it waited for the lock before saying so
        assert busy.notice and "is busy" in busy.notice and "damaged" not in busy.notice
        assert busy.list() == []  # this session's chats are kept apart, not written over the history
        busy.close()
        with pytest.raises(ChatStoreBusy, match="is busy: another Hearth window"):
            ChatStore(path, recover=False, busy_timeout=0.2)
        assert sorted(p.name for p in tmp_path.iterdir() if "damaged" in p.name) == []
    finally:
        holder.communicate("go\n", timeout=10)
    assert holder.returncode == 0
    again = ChatStore(path)
    assert again.notice is None
    assert sorted(c.title for c in again.list()) == ["by the holder", "mine"]
    assert [m.content for m in again.messages(cid)] == ["hello"]


def test_a_write_while_another_process_holds_the_lock_is_busy(tmp_path):
    path = tmp_path / "chats.sqlite3"
    store = ChatStore(path, busy_timeout=0.3)
    cid = store.create("mine")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ChatStoreBusy, match="is busy"):
            store.add_message(cid, "user", "while held")
    finally:
        holder.communicate("go\n", timeout=10)
    store.add_message(cid, "user", "after")
    assert [m.content for m in store.messages(cid)] == ["after"]


def test_a_regenerated_answer_keeps_the_earlier_one_and_either_can_be_shown(tmp_path):
    store = ChatStore(tmp_path / "chats.db")
    cid = store.create("t")
    store.add_message(cid, "user", "Name a fruit.")
    answer = store.add_message(cid, "assistant", "Apple.", {"completion_tokens": 2})
    assert store.add_version(answer, "Pear.", {"completion_tokens": 2}) == 2
    shown = store.messages(cid)[-1]
    assert (shown.content, shown.version, shown.versions) == ("Pear.", 2, 2)
    store.show_version(answer, 1)
    shown = store.messages(cid)[-1]
    assert (shown.content, shown.version, shown.versions, shown.meta["completion_tokens"]) == ("Apple.", 1, 2, 2)


def test_an_edited_question_keeps_the_old_one_with_what_followed_it(tmp_path):
    store = ChatStore(tmp_path / "chats.db")
    cid = store.create("t")
    q1 = store.add_message(cid, "user", "Capital of France?")
    store.add_message(cid, "assistant", "Paris.")
    store.add_message(cid, "user", "And of Spain?")
    store.add_message(cid, "assistant", "Madrid.")
    store.add_version(q1, "Capital of Italy?")
    assert [(m.role, m.content) for m in store.messages(cid)] == [("user", "Capital of Italy?")]
    store.add_message(cid, "assistant", "Rome.")
    store.show_version(q1, 1)
    assert [m.content for m in store.messages(cid)] == ["Capital of France?", "Paris.", "And of Spain?", "Madrid."]
    store.show_version(q1, 2)
    assert [m.content for m in store.messages(cid)] == ["Capital of Italy?", "Rome."]


def test_regenerating_an_earlier_answer_keeps_the_later_branch_with_its_own_alternatives(tmp_path):
    path = tmp_path / "chats.db"
    store = ChatStore(path)
    cid = store.create("t")
    store.add_message(cid, "user", "Capital of France?")
    a1 = store.add_message(cid, "assistant", "Paris.")
    store.add_message(cid, "user", "And of Spain?")
    a2 = store.add_message(cid, "assistant", "Madrid.")
    store.add_version(a2, "Madrid, of course.")  # the later answer has two alternatives
    store.add_version(a1, "It is Paris.")  # an earlier answer regenerated: a new branch from there
    assert [m.content for m in store.messages(cid)] == ["Capital of France?", "It is Paris."]
    store.close()
    store = ChatStore(path)  # reopened: the alternatives are in the file
    store.show_version(a1, 1)
    msgs = store.messages(cid)
    assert [m.content for m in msgs] == ["Capital of France?", "Paris.", "And of Spain?", "Madrid, of course."]
    later = msgs[-1]
    assert (later.version, later.versions) == (2, 2)
    store.show_version(later.id, 1)
    assert store.messages(cid)[-1].content == "Madrid."
    store.show_version(a1, 2)
    assert [m.content for m in store.messages(cid)] == ["Capital of France?", "It is Paris."]
    store.show_version(a1, 1)  # the branch comes back as it was left: its later answer on version 1
    assert [(m.content, m.version) for m in store.messages(cid)][-1] == ("Madrid.", 1)


def test_a_history_from_before_versions_opens_with_its_chats(tmp_path):
    import sqlite3

    path = tmp_path / "chats.db"
    old = sqlite3.connect(str(path))
    old.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '', created REAL NOT NULL, updated REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL
            REFERENCES conversations(id) ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL);
        INSERT INTO conversations VALUES (1, 'old chat', '', 0, 0);
        INSERT INTO messages VALUES (1, 1, 'user', 'hi', '{}', 0), (2, 1, 'assistant', 'hello', '{}', 0);
    """)
    old.commit()
    old.close()
    store = ChatStore(path)
    assert [(m.content, m.versions) for m in store.messages(1)] == [("hi", 1), ("hello", 1)]
    store.add_version(2, "hey")
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == 5
    assert store.media_count() == 0  # schema 5: a history from before has no images
    assert [m.content for m in store.messages(1)] == ["hi", "hey"]
    assert store.chat_tools(1) == []  # schema 3: a chat from before uses no tools
    store.set_chat_tools(1, ["time"])
    assert store.chat_tools(1) == ["time"]


def test_recovering_a_damaged_history_keeps_the_versions_of_its_messages(tmp_path):
    from app.core.chats.store import _copy_readable

    path = tmp_path / "chats.sqlite3"
    store = ChatStore(path)
    cid = store.create("fruit")
    store.add_message(cid, "user", "Name a fruit.")
    answer = store.add_message(cid, "assistant", "Apple.")
    store.add_version(answer, "Pear.")
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    copy = ChatStore(":memory:")  # the fresh store that recovery copies into
    assert _copy_readable(path, copy.db) == (1, 1)
    shown = copy.messages(cid)[-1]
    assert (shown.content, shown.version, shown.versions) == ("Pear.", 2, 2)
    copy.show_version(answer, 1)
    assert copy.messages(cid)[-1].content == "Apple."


def test_an_image_is_kept_once_by_its_hash_and_goes_with_the_last_chat_that_carries_it(tmp_path):
    """#53: images and sounds live in the store once per content hash, never as base64 inside a message; a chat's
    deletion drops only what no other message, version or branch still shows."""
    store = ChatStore(tmp_path / "chats.sqlite3")
    picture = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
    first, second = store.create("a"), store.create("b")
    ref = store.keep_media("image", "cat.png", picture)
    assert ref == {"digest": hashlib.sha256(picture).hexdigest(), "kind": "image", "name": "cat.png"}
    store.add_message(first, "user", "What is this?", {"media": [ref]})
    asked = store.add_message(second, "user", "And this?", {"media": [store.keep_media("image", "cat.png", picture)]})
    assert store.media_count() == 1 and store.media_data(ref["digest"]) == picture
    assert "base64" not in store.db.execute("SELECT meta FROM messages WHERE id = ?", (asked,)).fetchone()[0]
    store.add_version(asked, "Edited, without it")  # the first version keeps the image
    store.delete(first)
    assert store.media_count() == 1  # the other chat's earlier version still shows it
    store.delete(second)
    assert store.media_count() == 0
    store.close()
    again = ChatStore(tmp_path / "chats.sqlite3")  # and it is on the disk, not in memory
    assert again.media_count() == 0 and not again.in_memory
