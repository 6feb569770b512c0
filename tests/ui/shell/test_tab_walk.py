"""#55 B: every page walked with Tab as a keyboard-only user does: Tab leaves every control (no trap), never switches
the chat, reaches every control once per round, and every control has a name a screen reader says."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QAbstractScrollArea, QAbstractSpinBox,
                               QApplication, QComboBox, QLabel, QLineEdit, QTabBar, QWidget)

PRESSES = 200


def says_its_own_name(widget: QWidget) -> bool:
    """Buttons and check boxes say their text; every other control needs a name of its own (set, or a label's buddy):
    without one a screen reader says its value ("f16", "4,096 tokens") or a group's title for every box in it."""
    if isinstance(widget, (QAbstractButton, QTabBar)):
        return bool(widget.text().strip()) if isinstance(widget, QAbstractButton) else True
    if widget.accessibleName().strip():
        return True
    return any(isinstance(label, QLabel) and label.buddy() is widget and label.text().strip()
               for label in widget.window().findChildren(QLabel))


def controls(page: QWidget) -> list[QWidget]:
    """What Tab should reach on a page: visible, enabled, focusable by Tab."""
    return [w for w in page.findChildren(QWidget) if w.isVisibleTo(page) and w.isEnabled()
            and w.focusPolicy() & Qt.TabFocus and isinstance(w, (QAbstractButton, QAbstractSpinBox, QComboBox,
                                                                  QLineEdit, QAbstractScrollArea, QTabBar))
            and not isinstance(w.parentWidget(), (QAbstractSpinBox, QComboBox))]  # their own inner line edit


def walk(qtbot, window, start: QWidget) -> list[QWidget]:
    start.setFocus(Qt.TabFocusReason)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is start, timeout=2_000)
    seen = []
    for _ in range(PRESSES):
        focused = QApplication.focusWidget()
        seen.append(focused)
        qtbot.keyClick(focused, Qt.Key_Tab)
    return seen


@pytest.mark.parametrize("mode", ["simple", "full"])
def test_every_page_can_be_walked_with_tab_and_every_control_is_named(qtbot, idle_window, mode):
    w = idle_window
    w.set_mode(mode, save=False)
    w.resize(1280, 800)
    w.activateWindow()
    cid = w.store.create("A chat")
    w.store.add_message(cid, "user", "Hello")
    w.chat.conversations.refresh()
    w.chat.new_conversation()
    problems = []
    for index in range(w.tabs.count()):
        if not w.tabs.isTabVisible(index):
            continue
        w.tabs.setCurrentIndex(index)
        page, title = w.tabs.widget(index), w.tabs.tabText(index)
        qtbot.wait(200)  # a page built on first show fills in
        seen = walk(qtbot, w, w.tabs.tabBar())
        stuck = {f"{type(a).__name__} {a.accessibleName()!r}" for a, b, c in zip(seen, seen[1:], seen[2:])
                 if a is b is c}
        if stuck:
            problems.append(f"{title}: Tab never leaves {sorted(stuck)}")
        reached = set(seen)
        missed = [f"{type(c).__name__} {c.accessibleName() or getattr(c, 'text', lambda: '')()!r}"
                  for c in controls(page) if c not in reached]
        if missed:
            problems.append(f"{title}: Tab never reaches {missed}")
        unnamed = sorted({f"{type(c).__name__}" + (f" showing {c.currentText()!r}" if isinstance(c, QComboBox) else "")
                          for c in reached if c is not None and c.window() is w and not says_its_own_name(c)})
        if unnamed:
            problems.append(f"{title}: no name for {unnamed}")
        assert w.chat.conversation_id is None, f"walking {title} switched the chat"
    assert problems == [], "\n".join(problems)


def test_the_transcript_is_one_tab_stop_and_its_actions_are_reached_from_the_caret(qtbot, idle_window):
    """#55 B3: every link of the transcript was a Tab stop, about five a message."""
    from PySide6.QtGui import QTextCursor

    w = idle_window
    w.activateWindow()
    cid = w.store.create("Long chat")
    for n in range(30):
        w.store.add_message(cid, "user", f"Question {n}")
        w.store.add_message(cid, "assistant", f"Answer {n} with `code` and more.")
    w.chat.conversations.refresh(select=cid)
    w.chat.open_conversation(cid)
    transcript = w.chat.transcript
    qtbot.waitUntil(lambda: not transcript.loading, timeout=5_000)
    transcript.setFocus(Qt.TabFocusReason)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is transcript, timeout=2_000)
    qtbot.keyClick(transcript, Qt.Key_Tab)
    assert QApplication.focusWidget() is not transcript  # one press leaves it, whatever it holds
    # From the keyboard: the caret in an answer's text, and its message's actions are at hand.
    cursor = transcript.document().find("Answer 3 with")
    assert not cursor.isNull()
    labels = [label for label, _href in transcript.links_at(cursor.position())]
    assert "Copy" in labels and "Regenerate" in labels, labels
    last_id = w.store.messages(cid)[-1].id
    cursor.movePosition(QTextCursor.End)
    assert f"message-copy:{last_id}" in [h for _, h in transcript.links_at(cursor.position())]  # the last one's own
