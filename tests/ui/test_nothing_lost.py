"""#17 "Nothing is lost": quitting mid-answer keeps the answer, deleting a chat asks first, regenerate keeps
the earlier answers to page through, and any earlier message can be edited."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer
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
    from app.ui.main_window import MainWindow

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
