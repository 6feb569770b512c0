"""The dark theme (#49.18): the chat's Documents check boxes are seen, and an open transcript's links take the
theme's colour at the switch, not at the next opening of a chat."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from app.ui.shell import theme


def anchor_colours(transcript) -> set[str]:
    found = set()
    block = transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isAnchor():
                found.add(fmt.foreground().color().name())
            it += 1
        block = block.next()
    return found


def box_contrast(image, rect) -> float:
    """How far the darkest or lightest pixel on the box's edge is from the list's background (0..255)."""
    background = QColor(image.pixel(rect.right() + 6, rect.center().y())).lightness()
    edge = [QColor(image.pixel(x, rect.top())).lightness() for x in range(rect.left(), rect.right())]
    return max(abs(value - background) for value in edge)


def test_check_boxes_and_links_on_the_dark_theme(qtbot, idle_window, monkeypatch):
    from app.docs.store import Store

    store = Store()
    store.collection_id("home", create=True)
    store.close()
    w = idle_window
    app = QApplication.instance()
    monkeypatch.setattr(theme, "chosen", "light")
    monkeypatch.delenv("HEARTH_THEME", raising=False)
    theme.apply_theme(app, False)
    panel = w.chat.collections_panel
    panel.refresh()
    w.chat.transcript.show_messages([("user", "Hello", "", [("Copy", "message-copy:1"), ("Edit", "edit:1")])])
    qtbot.waitUntil(lambda: "Hello" in w.chat.transcript.plain_text(), timeout=5_000)
    assert anchor_colours(w.chat.transcript) == {theme.LIGHT["link"]}

    theme.apply_theme(app, True)
    qtbot.wait(50)
    assert anchor_colours(w.chat.transcript) == {theme.DARK["link"]}  # at once, the chat still open
    # The unticked collection's box stands out from the dark list (it was near black on near black).
    item = panel.list.item(0)
    assert item.checkState() == Qt.Unchecked
    image = panel.list.viewport().grab().toImage()
    row = panel.list.visualItemRect(item)
    box = row.adjusted(3, 2, 0, -2)
    box.setWidth(box.height())
    assert box_contrast(image, box) > 40
    theme.apply_theme(app, False)
