"""A keyboard-only user (#49.12): Tab in the message box and in the system-prompt box typed a tab character, so
nothing past them (Send, the chat list, the sampling boxes) could be reached with Tab."""

from __future__ import annotations

from PySide6.QtCore import Qt


def test_tab_moves_the_focus_out_of_the_message_and_system_prompt_boxes(qtbot, idle_window):
    w = idle_window
    w.activateWindow()
    for box in (w.chat.input, w.chat.system_prompt):
        box.setPlainText("Hello")
        box.setFocus(Qt.TabFocusReason)
        qtbot.waitUntil(lambda box=box: w.focusWidget() is box, timeout=2_000)
        qtbot.keyClick(box, Qt.Key_Tab)
        assert box.toPlainText() == "Hello"  # no tab character typed
        assert w.focusWidget() is not box  # the focus went on to the next control
        qtbot.keyClick(w.focusWidget(), Qt.Key_Backtab)
        assert w.focusWidget() is box  # and Shift+Tab comes back


def test_tab_into_the_chat_list_never_switches_the_chat_and_a_draft_stays_with_its_chat(qtbot, idle_window):
    """#55 B1: Ctrl+N, a message typed, then Tab until the chat list: Qt made its first chat current, which opened
    it with the unsent text still in the box, to be sent there."""
    w = idle_window
    for title in ("Older chat", "Newer chat"):
        cid = w.store.create(title)
        w.store.add_message(cid, "user", f"A question in {title}")
    w.chat.conversations.refresh()
    w.activateWindow()
    w.chat.new_conversation()
    w.chat.input.setPlainText("My unsent question")
    w.chat.input.setFocus(Qt.TabFocusReason)
    qtbot.waitUntil(lambda: w.focusWidget() is w.chat.input, timeout=2_000)
    chat_list = w.chat.conversations.list
    for _ in range(60):
        qtbot.keyClick(w.focusWidget(), Qt.Key_Tab)
        if w.focusWidget() is chat_list:
            break
    assert w.focusWidget() is chat_list, "Tab never reached the chat list"
    assert w.chat.conversation_id is None and w.chat.input.toPlainText() == "My unsent question"
    # The arrow keys do open a chat: the draft stays with the new chat, not in the box of the one opened.
    qtbot.keyClick(chat_list, Qt.Key_Down)
    assert w.chat.conversation_id is not None and w.chat.input.toPlainText() == ""
    w.chat.new_conversation()
    assert w.chat.input.toPlainText() == "My unsent question"
