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
