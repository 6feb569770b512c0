"""The answer in progress, saved while it streams (app/core/chats/answer_saving.py): what each kind of answer becomes,
what a crash leaves, and what a save costs."""

from __future__ import annotations

import subprocess
import sys
import time

from app.core.chats import answer_saving
from app.core.chats.answer_saving import INTERRUPTED, StreamingAnswer, recover_interrupted
from app.core.chats.store import ChatStore
from app.core.store.process_owner import owner_of


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def chat(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    cid = store.create("Sea")
    store.add_message(cid, "user", "A poem about the sea.")
    return store, cid


def test_a_new_answer_is_saved_at_most_every_interval_and_whole_at_its_end(tmp_path):
    store, cid = chat(tmp_path)
    clock = Clock()
    answer = StreamingAnswer(store, cid, {"model": "m"}, clock=clock)
    assert not answer.update("The sea")  # too soon after the start
    clock.now = 0.6
    assert answer.update("The sea is")
    assert not answer.update("The sea is") and store.drafts()[0]["content"] == "The sea is"
    clock.now = 0.7
    assert not answer.update("The sea is grey")  # within the interval: the next save takes it
    assert [m.role for m in store.messages(cid)] == ["user"]  # a draft, not yet a message
    saved = answer.finish("The sea is grey.", {"finish_reason": "stop", "completion_tokens": 5})
    assert store.drafts() == [] and saved.content == "The sea is grey."
    assert saved.meta == {"model": "m", "finish_reason": "stop", "completion_tokens": 5}
    assert answer.saves == 1


def test_a_crash_leaves_a_draft_that_the_next_start_saves_marked_interrupted(tmp_path):
    store, cid = chat(tmp_path)
    answer = StreamingAnswer(store, cid, {"model": "m"}, interval_s=0)
    answer.update("The sea is")
    answer_saving._live.clear()  # as after the process that owned it died
    assert recover_interrupted(store) == [cid]
    [_question, got] = store.messages(cid)
    assert got.content == "The sea is" and got.meta == {"model": "m", "finish_reason": INTERRUPTED}
    assert store.drafts() == []


def test_a_draft_of_a_live_process_is_left_alone_and_a_dead_ones_is_saved(tmp_path):
    store, cid = chat(tmp_path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        draft = store.begin_draft(cid, "new", None, "Waves", {}, owner_of(other.pid))
        assert recover_interrupted(store) == [] and store.drafts()[0]["id"] == draft
    finally:
        other.kill()
        other.wait()
    assert recover_interrupted(store) == [cid] and store.messages(cid)[-1].content == "Waves"


def test_a_regenerated_answer_becomes_a_version_and_a_continued_one_its_answers_text(tmp_path):
    store, cid = chat(tmp_path)
    first = store.add_message(cid, "assistant", "Old answer", {"completion_tokens": 2, "thought_s": 1.5})
    again = StreamingAnswer(store, cid, {}, regenerating=first, interval_s=0)
    again.update("New")
    answer_saving._live.clear()
    recover_interrupted(store)
    msg = store.message(first)
    assert (msg.content, msg.versions, msg.version) == ("New", 2, 2) and msg.meta["finish_reason"] == INTERRUPTED
    assert store.versions(first)[0]["content"] == "Old answer"

    more = StreamingAnswer(store, cid, {}, continuing=store.message(first), interval_s=0)
    more.update(" and more")
    saved = more.finish(" and more.", {"finish_reason": "length", "completion_tokens": 3})
    assert saved.id == first and saved.content == "New and more."
    assert saved.meta["continued"] and saved.meta["finish_reason"] == "length"


def test_a_retry_that_fails_before_its_first_token_keeps_the_answer_it_would_replace(tmp_path):
    store, cid = chat(tmp_path)
    first = store.add_message(cid, "assistant", "Kept")
    retry = StreamingAnswer(store, cid, {}, regenerating=first)
    retry.finish("", {"error": "The engine crashed.", "finish_reason": "error"})
    assert store.message(first).content == "Kept" and store.message(first).versions == 1


def test_a_save_is_one_small_transaction(tmp_path):
    """The cost the window pays twice a second while an answer streams, on a 30,000-character answer."""
    store, cid = chat(tmp_path)
    answer = StreamingAnswer(store, cid, {}, interval_s=0)
    text = ""
    took = []
    for i in range(50):
        text += "The sea rolls on, grey and green, under a low sky. " * 12
        started = time.perf_counter()
        assert answer.update(text)
        took.append(time.perf_counter() - started)
    took.sort()
    print(f"a save of up to {len(text):,} characters: median {1000 * took[25]:.2f} ms, max {1000 * took[-1]:.2f} ms "
          f"(twice a second: {2 * 100 * took[25]:.2f}% of one core)")
    assert took[25] < 0.02


class HeldLock:
    """Another program holding the chat history's write lock (BEGIN EXCLUSIVE on its own connection)."""

    def __init__(self, path):
        import sqlite3
        self.db = sqlite3.connect(str(path), isolation_level=None)
        self.db.execute("BEGIN EXCLUSIVE")

    def release(self):
        self.db.execute("COMMIT")
        self.db.close()


def test_a_locked_store_never_holds_the_caller_and_the_end_is_saved_when_the_lock_goes(tmp_path):
    """#56 A1: the window's saves ran into a 5 s busy wait at every save, the end raised, and the answer shown
    was lost. With a short wait, saves fail fast, and the end is saved later, whole, on the answer's own thread."""
    store, cid = chat(tmp_path)
    store.wait_for_locks(0.05)
    got = []
    answer = StreamingAnswer(store, cid, {"model": "m"}, interval_s=0, on_saved=got.append)
    assert answer.update("The sea")
    lock = HeldLock(store.path)
    try:
        started = time.monotonic()
        assert not answer.update("The sea is grey")  # busy: said, not waited for
        assert answer.problem and "busy" in answer.problem
        saved = answer.finish("The sea is grey and wide.", {"finish_reason": "stop"})
        assert time.monotonic() - started < 1.0
        assert saved is None and answer.saving_later
        time.sleep(0.6)  # retried meanwhile, while the lock holds
        assert not got and [m.role for m in store.messages(cid)] == ["user"]
    finally:
        lock.release()
    assert answer.wait_saved(10)
    [message] = got
    assert message.content == "The sea is grey and wide." and message.meta["finish_reason"] == "stop"
    assert [m.content for m in store.messages(cid)][-1] == "The sea is grey and wide." and store.drafts() == []
    assert answer.problem is None


def test_an_answer_begun_while_the_store_is_locked_is_still_saved(tmp_path):
    store, cid = chat(tmp_path)
    store.wait_for_locks(0.05)
    got = []
    lock = HeldLock(store.path)
    try:
        answer = StreamingAnswer(store, cid, {}, interval_s=0, on_saved=got.append)  # no draft could begin
        assert answer.draft_id is None and answer.problem
        assert answer.finish("Waves.", {"finish_reason": "stop"}) is None
    finally:
        lock.release()
    assert answer.wait_saved(10) and got[0].content == "Waves."
    assert [m.role for m in store.messages(cid)] == ["user", "assistant"] and store.drafts() == []
