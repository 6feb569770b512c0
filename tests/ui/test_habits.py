"""#17 "Habits of the other apps": Enter sends (a setting), a Settings dialog, errors said once and cleared,
the Benchmark tab's explanations, import that confirms and selects, a damaged header named as such."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor


def test_enter_sends_and_shift_enter_adds_a_line_and_the_setting_turns_it_round(qtbot, idle_window, hearth_home):
    from app.core.settings import load_settings

    w = idle_window
    box = w.chat.input
    box.setFocus()
    with qtbot.waitSignal(box.submitted, timeout=1_000):
        qtbot.keyClick(box, Qt.Key_Return)
    box.setPlainText("first line")
    box.moveCursor(QTextCursor.End)
    with qtbot.assertNotEmitted(box.submitted):
        qtbot.keyClick(box, Qt.Key_Return, Qt.ShiftModifier)
    assert box.toPlainText() == "first line\n"
    dialog = w.open_settings()
    dialog.send_key.setCurrentIndex(dialog.send_key.findData(False))
    dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
    dialog.accept()
    try:
        assert load_settings()["enter_sends"] is False and load_settings()["theme"] == "dark"
        assert "Ctrl+Enter sends" in box.placeholderText()
        with qtbot.assertNotEmitted(box.submitted):
            qtbot.keyClick(box, Qt.Key_Return)
        assert box.toPlainText() == "first line\n\n"  # (Ctrl+Enter still sends: the window's shortcut)
    finally:
        w.apply_settings({"theme": "system", "enter_sends": True})
