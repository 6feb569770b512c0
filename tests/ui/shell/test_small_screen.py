"""At 1024x600 (#49.16) the chat's side column scrolls instead of crushing its boxes: the sampling numbers were cut
to half a line."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractSpinBox, QComboBox


def test_the_chat_s_side_column_scrolls_at_1024x600_and_no_box_is_crushed(qtbot, idle_window):
    w = idle_window
    w.resize(1024, 600)
    qtbot.waitUntil(lambda: w.height() == 600 and w.width() == 1024, timeout=2_000)
    qtbot.wait(50)  # the layout's turn
    controls = [c for kind in (QAbstractSpinBox, QComboBox) for c in w.chat.sampling.findChildren(kind)
                if c.isVisibleTo(w.chat)]
    assert len(controls) >= 8
    crushed = [(c.objectName() or type(c).__name__, c.height(), c.sizeHint().height()) for c in controls
               if c.height() < c.sizeHint().height()]
    assert crushed == []
    bar = w.chat.side_scroll.verticalScrollBar()
    assert bar.maximum() > 0  # the rest is reached by scrolling
    bar.setValue(bar.maximum())
    tools = w.chat.tools_panel
    assert tools.visibleRegion().boundingRect().height() > 0  # the last box comes into view
