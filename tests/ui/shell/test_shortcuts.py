"""#31, shortcuts: Ctrl+F searches the chats, Ctrl+Shift+C copies the last answer, Ctrl+R regenerates (with a model:
tests/ui/chat/test_answer_models.py), and Help lists every shortcut the window has."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence

from app.core.chats.store import ChatStore


def test_ctrl_f_searches_and_ctrl_shift_c_copies_the_last_answer(qtbot, idle_window):
    w = idle_window
    store = ChatStore()
    cid = store.create("Sky")
    store.add_message(cid, "user", "What colour is the sky?")
    store.add_message(cid, "assistant", "<think>easy</think>\n\nBlue, mostly.")
    store.add_message(cid, "user", "And at night?")  # the last answer is not the last message
    w.chat.conversations.refresh()
    w.chat.open_conversation(cid)
    w.chat.input.setFocus()
    qtbot.waitUntil(w.chat.input.hasFocus, timeout=2_000)

    qtbot.keyClick(w.chat.input, Qt.Key_C, Qt.ControlModifier | Qt.ShiftModifier)
    assert QGuiApplication.clipboard().text() == "Blue, mostly."
    assert w.statusBar().currentMessage() == "Copied to the clipboard"
    w.tabs.setCurrentWidget(w.models)
    qtbot.keyClick(w, Qt.Key_F, Qt.ControlModifier)
    search = w.chat.conversations.search
    assert w.tabs.currentWidget() is w.chat and search.hasFocus()
    qtbot.keyClicks(search, "nothing like it")
    assert w.chat.conversations.list.count() == 0
    search.clear()
    w.chat.new_conversation()
    QGuiApplication.clipboard().setText("kept")
    qtbot.keyClick(w.chat.input, Qt.Key_C, Qt.ControlModifier | Qt.ShiftModifier)
    assert QGuiApplication.clipboard().text() == "kept"
    assert w.statusBar().currentMessage() == "This chat has no answer to copy yet."


def test_help_lists_every_shortcut(qtbot, idle_window):
    w = idle_window
    box = w.show_shortcuts()
    text = box.text()
    for action in w.findChildren(QAction):
        if not action.shortcut().isEmpty():
            assert f"<b>{action.shortcut().toString(QKeySequence.NativeText)}</b>" in text, action.text()
    for keys in ("Ctrl+F", "Ctrl+R", "Ctrl+Shift+C", "Ctrl+N", "Esc", "Shift+Enter"):
        assert f"<b>{keys}</b>" in text
    assert "Copy last answer" in text and "Regenerate last answer" in text and "Search chats" in text
    box.close()


def test_the_live_monitor_closes_and_opens_from_the_keyboard(qtbot, idle_window):
    """#55 B4: the monitor's close button (drawn in the dock's title bar) takes no focus; Ctrl+Shift+M (View > Live
    monitor) closes and opens it from the keyboard, and Help lists it."""
    w = idle_window
    dock = w.monitor_dock
    assert dock.isVisible()  # the full window
    w.chat.input.setFocus()
    qtbot.waitUntil(w.chat.input.hasFocus, timeout=2_000)
    qtbot.keyClick(w.chat.input, Qt.Key_M, Qt.ControlModifier | Qt.ShiftModifier)
    qtbot.waitUntil(lambda: not dock.isVisible(), timeout=2_000)
    qtbot.keyClick(w.chat.input, Qt.Key_M, Qt.ControlModifier | Qt.ShiftModifier)
    qtbot.waitUntil(dock.isVisible, timeout=2_000)
    box = w.show_shortcuts()
    assert "<b>Ctrl+Shift+M</b>" in box.text() and "Live monitor" in box.text()
    box.close()
