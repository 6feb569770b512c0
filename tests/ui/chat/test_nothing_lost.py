"""#17 "Nothing is lost": quitting mid-answer keeps the answer, deleting a chat asks first, regenerate keeps
the earlier answers to page through, and any earlier message can be edited."""

from __future__ import annotations

import time

from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from tests.ui.conftest import ask


def answer_dialog(qtbot, button) -> list[str]:
    """Press `button` on the next message box that opens; returns [its text] once it has been seen."""
    seen: list[str] = []

    def press():
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            seen.append(box.text())
            box.button(button).click()
        else:
            QTimer.singleShot(20, press)

    QTimer.singleShot(20, press)
    return seen


def chat_titles(w) -> list[str]:
    return [w.chat.conversations.list.item(i).text() for i in range(w.chat.conversations.list.count())]


def test_the_delete_button_asks_before_deleting_a_chat(qtbot, idle_window):
    w = idle_window
    cid = w.store.create("Keep me")
    w.store.add_message(cid, "user", "hello")
    w.chat.conversations.refresh(select=cid)
    seen = answer_dialog(qtbot, QMessageBox.No)
    qtbot.mouseClick(w.chat.conversations.delete_button, Qt.LeftButton)
    assert seen and "Keep me" in seen[0]
    assert w.store.get(cid) is not None and chat_titles(w) == ["Keep me"]
    seen = answer_dialog(qtbot, QMessageBox.Yes)
    qtbot.mouseClick(w.chat.conversations.delete_button, Qt.LeftButton)
    assert seen and w.store.get(cid) is None and chat_titles(w) == []


def test_quitting_mid_answer_keeps_the_partial_answer_marked_stopped_and_is_quick(qtbot, main_window):
    from app.ui.shell.main_window import MainWindow

    w = main_window
    w.chat.sampling_overrides = {"ignore_eos": True}
    ask(qtbot, w, "Count from one to a thousand.", max_tokens=4000, wait=False)
    qtbot.waitUntil(lambda: len(w.chat.transcript.stream_text()) > 40, timeout=30_000)
    cid = w.chat.conversation_id
    started = time.perf_counter()
    w.close()
    took = time.perf_counter() - started
    print(f"close took {took:.2f} s")

    again = MainWindow(load_on_start=False)
    qtbot.addWidget(again)
    again.show()
    try:
        messages = again.store.messages(cid)
        assert [m.role for m in messages] == ["user", "assistant"]
        assert len(messages[1].content) > 40 and messages[1].meta.get("finish_reason") == "cancelled"
        qtbot.waitUntil(lambda: not again.chat.transcript.loading, timeout=5_000)
        assert "stopped" in again.chat.transcript.toPlainText()
    finally:
        again.close()
    assert took < 1.0, f"quitting took {took:.2f} s"


def link_point(transcript, href: str):
    """Where the link with this href is drawn in the transcript's viewport (None when it is not there)."""
    from PySide6.QtGui import QTextCursor

    block = transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().anchorHref() == href:
                cursor = QTextCursor(transcript.document())
                cursor.setPosition(fragment.position())
                transcript.setTextCursor(cursor)
                transcript.ensureCursorVisible()
                # The cursor's rectangle is the link's left edge: a few pixels in is on its first character.
                return transcript.cursorRect(cursor).center() + QPoint(3, 0)
            it += 1
        block = block.next()
    return None


def click_link(qtbot, transcript, href: str) -> None:
    qtbot.waitUntil(lambda: not transcript.loading, timeout=5_000)
    point = link_point(transcript, href)
    assert point is not None, f"no link {href} in the transcript"
    qtbot.mouseClick(transcript.viewport(), Qt.LeftButton, pos=point)


def open_chat(qtbot, w, turns: list[tuple[str, str]]) -> int:
    cid = w.store.create("Capitals")
    for role, text in turns:
        w.store.add_message(cid, role, text)
    w.chat.conversations.refresh(select=cid)
    w.chat.open_conversation(cid)
    qtbot.waitUntil(lambda: not w.chat.transcript.loading, timeout=5_000)
    return cid


def test_every_message_has_a_copy_link(qtbot, idle_window):
    from PySide6.QtGui import QGuiApplication

    w = idle_window
    cid = open_chat(qtbot, w, [("user", "Capital of France?"), ("assistant", "It is **Paris**.")])
    answer = w.store.messages(cid)[1]
    QGuiApplication.clipboard().clear()
    click_link(qtbot, w.chat.transcript, f"message-copy:{answer.id}")
    qtbot.waitUntil(lambda: QGuiApplication.clipboard().text() != "", timeout=2_000)
    assert QGuiApplication.clipboard().text() == "It is **Paris**."


def test_regenerate_keeps_each_answer_and_the_arrows_page_through_them(qtbot, main_window):
    w = main_window
    first = ask(qtbot, w, "Name a fruit.", max_tokens=12, temperature=1.0)
    w.chat.sampling.seed.setValue(1234)
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000) as again:
        qtbot.mouseClick(w.chat.regen_button, Qt.LeftButton)
    cid = w.chat.conversation_id
    user, answer = w.store.messages(cid)
    assert (answer.content, answer.version, answer.versions) == (again.args[0]["text"], 2, 2)
    transcript = w.chat.transcript
    assert "2/2" in transcript.toPlainText() and transcript.toPlainText().count("Name a fruit.") == 1
    click_link(qtbot, transcript, f"prev:{answer.id}")
    qtbot.waitUntil(lambda: "1/2" in transcript.toPlainText(), timeout=5_000)
    assert w.store.messages(cid)[1].content == first["text"]
    click_link(qtbot, transcript, f"next:{answer.id}")
    qtbot.waitUntil(lambda: "2/2" in transcript.toPlainText(), timeout=5_000)
    assert w.store.messages(cid)[1].content == again.args[0]["text"]


def test_a_greedy_regenerate_asks_the_same_question_again(qtbot, main_window):
    """The kept answer is not part of the new request: greedy decoding gives the same answer again, drafted
    from the answer it replaces (predicted outputs), and the note says how much came as before."""
    w = main_window
    first = ask(qtbot, w, "Name three colors.", max_tokens=16)
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000) as again:
        qtbot.mouseClick(w.chat.regen_button, Qt.LeftButton)
    done = again.args[0]
    assert done["text"] == first["text"]
    assert done["spec"]["drafter"] == "prediction" and done["prediction"]["accepted"] >= done["completion_tokens"] - 1
    assert w.store.messages(w.chat.conversation_id)[1].versions == 2
    assert f"{done['prediction']['accepted']} tokens as before" in w.chat.transcript.toPlainText()


def test_an_earlier_question_can_be_edited_and_the_old_branch_paged_back(qtbot, main_window):
    w = main_window
    cid = open_chat(qtbot, w, [("user", "Capital of France?"), ("assistant", "Paris."),
                               ("user", "And of Spain?"), ("assistant", "Madrid.")])
    first = w.store.messages(cid)[0]
    click_link(qtbot, w.chat.transcript, f"edit:{first.id}")
    assert w.chat.input.toPlainText() == "Capital of France?" and w.chat.hint.isVisible()
    answer = ask(qtbot, w, "Capital of Italy?", max_tokens=6)
    assert [(m.role, m.content) for m in w.store.messages(cid)] == [("user", "Capital of Italy?"),
                                                                  ("assistant", answer["text"])]
    # The answer to the question as it was ("Paris.") was the prediction the new one was drafted from.
    assert answer["spec"]["drafter"] == "prediction" and answer["prediction"]["rejected"] >= 1
    transcript = w.chat.transcript
    qtbot.waitUntil(lambda: not transcript.loading, timeout=5_000)
    assert "Madrid" not in transcript.toPlainText() and "2/2" in transcript.toPlainText()
    click_link(qtbot, transcript, f"prev:{first.id}")
    qtbot.waitUntil(lambda: "Madrid" in transcript.toPlainText(), timeout=5_000)
    assert [m.content for m in w.store.messages(cid)] == ["Capital of France?", "Paris.", "And of Spain?",
                                                         "Madrid."]


def test_an_earlier_answer_can_be_regenerated_and_its_old_branch_comes_back_after_a_restart(qtbot, main_window):
    """As in LM Studio: regenerating an earlier answer starts a new branch there; the later turns belong to
    the old answer and come back when paging back to it, also after Hearth is closed and opened again."""
    from app.ui.shell.main_window import MainWindow

    w = main_window
    cid = open_chat(qtbot, w, [("user", "Capital of France?"), ("assistant", "Paris."),
                               ("user", "And of Spain?"), ("assistant", "Madrid.")])
    first_answer = w.store.messages(cid)[1]
    w.chat.sampling.max_tokens.setValue(8)
    w.chat.sampling.temperature.setValue(0.0)
    asked: list = []
    real_chat = w.bridge.chat
    w.bridge.chat = lambda messages, sampling: asked.append(messages) or real_chat(messages, sampling)
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000) as again:
        click_link(qtbot, w.chat.transcript, f"regenerate:{first_answer.id}")
    # The model was asked only what came before the regenerated answer.
    assert [m["content"] for m in asked[0]] == ["Capital of France?"]
    new_text = again.args[0]["text"]
    msgs = w.store.messages(cid)
    assert [(m.role, m.content) for m in msgs] == [("user", "Capital of France?"), ("assistant", new_text)]
    transcript = w.chat.transcript
    qtbot.waitUntil(lambda: "2/2" in transcript.toPlainText(), timeout=5_000)
    assert "Madrid" not in transcript.toPlainText()
    w.close()
    reopened = MainWindow(load_on_start=False)
    qtbot.addWidget(reopened)
    reopened.show()
    try:
        reopened.chat.open_conversation(cid)
        shown = reopened.chat.transcript
        qtbot.waitUntil(lambda: "2/2" in shown.toPlainText(), timeout=5_000)
        click_link(qtbot, shown, f"prev:{first_answer.id}")
        qtbot.waitUntil(lambda: "Madrid." in shown.toPlainText(), timeout=5_000)
        assert [m.content for m in reopened.store.messages(cid)] == ["Capital of France?", "Paris.",
                                                                     "And of Spain?", "Madrid."]
        assert "1/2" in shown.toPlainText()
    finally:
        reopened.close()


def test_regenerate_drafts_from_the_old_answer_only_by_its_own_setting(qtbot, main_window):
    """#49.4: with speculative decoding Off at load, Regenerate drafted from the old answer and the monitor showed
    a drafter at 0.77x. It is a setting of its own, shown under the load's speculation: off, nothing drafts."""
    w = main_window
    reuse = w.models.load_settings.reuse_answers
    assert reuse.isChecked() and w.bridge.options.draft_model is None and not w.bridge.options.lookup
    assert "Regenerate and Edit" in w.monitor.plots["draft"].title
    ask(qtbot, w, "Name three colors.", max_tokens=16)
    reuse.setChecked(False)
    assert w.settings["reuse_answer_drafts"] is False and not w.chat.reuse_answer_drafts
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000) as again:
        qtbot.mouseClick(w.chat.regen_button, Qt.LeftButton)
    done = again.args[0]
    assert "spec" not in done and "prediction" not in done
    assert "as before" not in w.chat.transcript.toPlainText()
    assert "speculative decoding" not in w.monitor.summary.text()


def test_drafting_from_the_old_answer_turns_itself_off_when_it_costs_speed(qtbot, main_window):
    """A regenerate drafted from an old answer that the new one does not follow: when that made it slower than
    plain decoding, the setting turns itself off and the status bar says so once; when not, it stays on."""
    w = main_window
    w.chat.sampling_overrides = {"ignore_eos": True}
    cid = open_chat(qtbot, w, [("user", "Count from one to fifty."),
                               ("assistant", " ".join(f"zq{i}x" for i in range(200)))])
    w.chat.sampling.max_tokens.setValue(96)
    w.chat.sampling.temperature.setValue(0.0)
    judged: list[float] = []
    w.chat.answer_drafts_cost_speed.connect(judged.append)  # emitted while the chat page takes the Done
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000) as got:
        w.chat.regenerate()
    spec = got.args[0]["spec"]
    print(f"drafted from an unrelated old answer: {spec}")
    assert spec["drafter"] == "prediction" and w.store.messages(cid)[1].versions == 2
    # How the engine's schedule went (it may stop drafting at once) decides; both ways are checked.
    slower = spec["drafted"] > 0 and spec["speedup"] < 1.0
    assert judged == ([spec["speedup"]] if slower else [])
    assert w.models.load_settings.reuse_answers.isChecked() is not slower
    assert w.settings.get("reuse_answer_drafts", True) is not slower
    # What the user sees when it does: the box unticked, saved, and one sentence in the status bar.
    w.chat.answer_drafts_cost_speed.emit(0.77)
    assert not w.models.load_settings.reuse_answers.isChecked() and w.settings["reuse_answer_drafts"] is False
    assert "(0.77x plain speed)" in w.statusBar().currentMessage()
    assert "no longer do it" in w.statusBar().currentMessage()


def test_paging_an_answer_keeps_the_view_at_the_pager(qtbot, idle_window):
    """#55 F: paging to 1/2 jumped the transcript to the bottom, away from the pager; and the pager sat 5 px from
    Continue, where a click meant for ‹ generated."""
    w = idle_window
    w.resize(1280, 800)
    cid = w.store.create("Paged")

    def pairs(tag: str) -> None:
        for n in range(20):
            w.store.add_message(cid, "user", f"{tag} question {n}")
            w.store.add_message(cid, "assistant", f"{tag} answer {n}.")

    pairs("Before")
    w.store.add_message(cid, "user", "Name a fruit.")
    answer = w.store.add_message(cid, "assistant", "Apple.")
    pairs("After apple")  # the first version's branch
    w.store.add_version(answer, "Pear.")
    pairs("After pear")  # the second's
    w.chat.conversations.refresh(select=cid)
    w.chat.open_conversation(cid)
    transcript = w.chat.transcript
    qtbot.waitUntil(lambda: not transcript.loading, timeout=5_000)
    bar = transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=5_000)  # laid out: long enough to scroll
    point = link_point(transcript, f"prev:{answer}")  # the pager scrolled into view, as the user did
    at = bar.value()
    assert point is not None and at < bar.maximum() * 0.9  # up in the middle, not at the end
    qtbot.mouseClick(transcript.viewport(), Qt.LeftButton, pos=point)
    qtbot.waitUntil(lambda: "1/2" in transcript.toPlainText() and not transcript.loading, timeout=5_000)
    qtbot.waitUntil(lambda: "After apple answer 19" in transcript.toPlainText(), timeout=5_000)
    qtbot.wait(100)
    assert abs(bar.value() - at) < bar.pageStep()  # still there, by the pager
    header = next(line for line in transcript.toPlainText().splitlines() if "1/2" in line)
    assert "·" in header.split("‹")[0][-8:]  # the pager set apart from the actions before it
