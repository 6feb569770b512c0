"""#17 "Fits any screen": a first start fits a 1366x768 screen, 1024x700 shows every page whole (settings
scroll, the monitor keeps a readable width), code blocks wrap with their Copy link in view, and long chat
titles end in "…"."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt


def inside_window(window, widget) -> bool:
    top_left = widget.mapTo(window, QPoint(0, 0))
    return (widget.isVisible() and top_left.x() >= 0 and top_left.y() >= 0
            and top_left.x() + widget.width() <= window.width() and top_left.y() + widget.height() <= window.height())


def test_the_first_size_fits_the_screen():
    from app.ui.shell.main_window import DEFAULT_SIZE, default_size

    width, height = default_size(1366, 768 - 40)  # a 768-pixel screen less its panel
    assert width <= 1366 and height <= 728
    assert default_size(1920, 1040) == DEFAULT_SIZE


def test_at_1024x700_every_page_fits_and_the_load_settings_scroll(qtbot, idle_window):
    w = idle_window
    w.resize(1024, 700)
    qtbot.waitUntil(lambda: w.width() == 1024 and w.height() == 700, timeout=2_000)
    assert w.minimumWidth() <= 1024 and w.minimumHeight() <= 700
    assert inside_window(w, w.monitor_dock) and w.monitor_dock.width() >= 240
    for i in range(w.tabs.count()):
        w.tabs.setCurrentIndex(i)
        page = w.tabs.widget(i)
        assert page.minimumSizeHint().width() <= w.tabs.width(), w.tabs.tabText(i)
    w.tabs.setCurrentWidget(w.models)
    qtbot.wait(50)
    settings = w.models.load_settings
    assert settings.width() >= settings.minimumSizeHint().width()  # nothing squeezed out of sight
    # The pane scrolls up and down only: a horizontal bar appeared to scroll the 8 pixels its vertical bar took.
    from app.ui.widgets import VerticalScroll

    qtbot.waitUntil(lambda: w.models.selected_path() is not None and w.models.fit_label.text() != "", timeout=20_000)
    qtbot.wait(50)
    pane = w.models.load_pane
    assert isinstance(pane, VerticalScroll)
    assert pane.verticalScrollBar().isVisible() and not pane.horizontalScrollBar().isVisible()
    assert inside_window(w, w.models.load_button) and inside_window(w, w.statusBar())
    w.tabs.setCurrentWidget(w.chat)
    qtbot.wait(50)
    for widget in (w.chat.send_button, w.chat.picker.eject_button, w.chat.input):
        assert inside_window(w, widget)


def squeezed(top) -> list[str]:
    """The visible widgets under `top` given less width than they need, or reaching past their parent
    (text cut or overlapped); what sits in a scroll area is left to the scroll bar."""
    from PySide6.QtWidgets import QAbstractScrollArea, QLabel, QWidget

    found = []
    for widget in top.findChildren(QWidget):
        parent = widget.parentWidget()
        if not widget.isVisible() or widget.isWindow() or parent is None:
            continue
        inside_scroll = False
        ancestor = parent
        while ancestor is not None and ancestor is not top:
            if isinstance(ancestor, QAbstractScrollArea):
                inside_scroll = True
                break
            ancestor = ancestor.parentWidget()
        if inside_scroll:
            continue
        name = f"{type(widget).__name__} {widget.objectName() or ''} {getattr(widget, 'text', lambda: '')()!r:.40}"
        hint = widget.minimumSizeHint()
        if hint.isValid() and widget.width() < hint.width() and not (isinstance(widget, QLabel) and
                                                                     widget.wordWrap()):
            found.append(f"{name}: {widget.width()} px wide, needs {hint.width()}")
        if not parent.rect().contains(widget.geometry()) and widget.width() > 0:
            found.append(f"{name}: reaches past {type(parent).__name__}")
    return found


def test_at_its_minimum_size_the_window_shows_every_page_whole(qtbot, idle_window):
    """The minimum is what the layout needs (a stated 900 pixels under a 1004-pixel layout cut the pages),
    at most 1024x700; at that size no page, the monitor or the status bar is cut, and the Load button shows."""
    w = idle_window
    w.model_label.setText("Meta-Llama-3.1-8B-Instruct-abliterated-uncensored-long-context-finetune-with-a-long-name · Q4_K_M")
    w.speed_label.setText("12.3 tok/s")
    w.ctx_label.setText("context 1234/4096")
    w.mem_label.setText("engine 1234 MB · GPU 1234/8000 MB")
    w.chat._editing = 1  # the longest hint the chat page shows
    w.chat._update_buttons()
    # The picker's longest state (after Eject). It once set the page's minimum: the window grew to 1053 pixels,
    # past a 1024-pixel screen, as it reopened (the state "loading…") and after an Eject (#31.7).
    w.chat.picker.show_state(None, False)
    assert w.chat.picker.state.text() == "no model loaded"
    w.resize(400, 300)  # a user dragging the corner as far as it goes
    qtbot.wait(100)
    smallest = w.size()
    assert smallest.width() <= 1024 and smallest.height() <= 700, smallest
    assert smallest.width() >= w.minimumSizeHint().width()
    for i in range(w.tabs.count()):
        w.tabs.setCurrentIndex(i)
        qtbot.wait(50)
        assert squeezed(w.tabs.currentWidget()) == [], w.tabs.tabText(i)
    assert squeezed(w.monitor_dock) == [] and squeezed(w.statusBar()) == []
    # The graphs fit the dock, with the longest note a graph's title carries (a wide title widened them all).
    w.monitor._on_loaded({"drafter": "lookup", "spec_plain_reason": "a draft token costs 37% of a target step "
                          "on this machine, so drafting cannot pay"})
    qtbot.wait(100)
    for plot in w.monitor.plots.values():
        assert plot.width() >= plot.minimumSizeHint().width()
        assert plot.title_width() <= plot.width(), plot.title
    from PySide6.QtWidgets import QLabel

    shown = QLabel.text(w.model_label)  # the long name ends in "…" instead of widening the window
    assert shown.startswith("Meta-Llama") and shown.endswith("…")
    w.tabs.setCurrentWidget(w.models)
    qtbot.wait(50)
    assert inside_window(w, w.models.load_button) and inside_window(w, w.statusBar())
    assert w.models.load_settings.width() >= w.models.load_settings.minimumSizeHint().width()


def test_the_monitor_cannot_be_shrunk_to_a_sliver_and_comes_back_readable(qtbot, idle_window, hearth_home):
    from app.ui.shell.main_window import MainWindow

    w = idle_window
    w.resize(1200, 760)
    w.resizeDocks([w.monitor_dock], [75], Qt.Horizontal)
    qtbot.wait(50)
    assert w.monitor_dock.width() >= 240
    w.close()
    again = MainWindow(load_on_start=False)
    qtbot.addWidget(again)
    again.show()
    try:
        qtbot.wait(50)
        assert again.monitor_dock.width() >= 240
    finally:
        again.close()


def test_a_long_code_line_wraps_in_its_block_with_copy_in_view_and_titles_elide(qtbot, idle_window):
    w = idle_window
    w.resize(1024, 700)
    long_title = "A very long title for a chat that goes on and on about quantization and more"
    cid = w.store.create(long_title)
    w.store.add_message(cid, "user", "Reverse a string.")
    w.store.add_message(cid, "assistant", "```python\ndef rev(s):\n    return s[::-1]" + "  # very long" * 30 +
                        "\n```\n")
    w.chat.conversations.refresh(select=cid)
    w.chat.open_conversation(cid)
    transcript = w.chat.transcript
    qtbot.waitUntil(lambda: not transcript.loading, timeout=5_000)
    qtbot.wait(50)
    assert transcript.horizontalScrollBar().maximum() == 0  # the transcript does not scroll sideways
    cursor = transcript.document().find("Copy code")
    rect = transcript.cursorRect(cursor)
    assert 0 <= rect.right() <= transcript.viewport().width()
    lst = w.chat.conversations.list
    item = lst.item(0)
    assert item.text() == long_title and item.toolTip() == long_title
    assert lst.horizontalScrollBarPolicy() == Qt.ScrollBarAlwaysOff and lst.textElideMode() == Qt.ElideRight
    assert lst.horizontalScrollBar().maximum() == 0 or not lst.horizontalScrollBar().isVisible()


def test_a_streaming_answer_shows_its_finished_paragraphs_as_markdown(qtbot):
    """Paragraphs render as they complete (no raw '**' until the end, then a reflow); an open code block shows as
    code, without its fence line (#55 F), and becomes Markdown when its fence closes."""
    from app.ui.chat.transcript import Transcript

    transcript = Transcript()
    qtbot.addWidget(transcript)
    transcript.resize(500, 400)
    transcript.show()
    transcript.begin_stream()
    for token in ["It is **", "Paris**", ".\n", "\nThen:\n", "```py\n", "x = 1\n\n", "y = 2"]:
        transcript.append_token(token)
        transcript.flush()
    shown = transcript.toPlainText()
    assert "It is Paris." in shown and "**" not in shown  # the finished paragraph, rendered
    assert "```" not in shown and "x = 1" in shown  # the code block is still open: its code, without the fence
    transcript.append_token("\n```\n\nDone")
    transcript.flush()
    assert "```" not in transcript.toPlainText() and "y = 2" in transcript.toPlainText()
    transcript.end_stream()
    assert transcript.toPlainText().count("It is Paris.") == 1 and "Copy code" in transcript.toPlainText()


def test_at_1024x600_the_window_fits_and_every_page_keeps_its_main_action_in_view(qtbot, idle_window):
    """#55 C: at 1024x600 the window opened 1024x700, its minimum height was 599, and the Models page's library
    shrank to a row and a half under the advice and the quality table."""
    from app.ui.shell.main_window import default_size

    free = (1024, 600 - 24)  # the screen less a panel
    assert default_size(*free)[0] <= free[0] and default_size(*free)[1] <= free[1]
    w = idle_window
    w.resize(*free)
    qtbot.waitUntil(lambda: w.height() == free[1] and w.width() == free[0], timeout=2_000)
    assert w.minimumSizeHint().height() <= free[1]
    qtbot.wait(50)
    for widget in (w.chat.send_button, w.chat.input, w.statusBar()):
        assert inside_window(w, widget), widget
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: w.models.table.rowCount() > 0, timeout=20_000)
    qtbot.wait(50)
    assert inside_window(w, w.models.load_button) and inside_window(w, w.statusBar())
    table = w.models.table
    assert table.viewport().height() >= 3 * table.verticalHeader().defaultSectionSize()  # three rows at least


def test_with_a_model_loaded_the_full_window_still_fits_1024x600(qtbot, main_window):
    """#55 C: with a model loaded the monitor's graphs asked for 542 px and the full window's minimum height became
    604, past a 1024x600 screen less its panel; the graphs scroll in their dock instead."""
    w = main_window
    w.monitor_dock.show()
    qtbot.wait(100)  # the monitor is built and filled after the load
    assert w.minimumSizeHint().height() <= 600 - 24
    w.resize(1024, 576)
    qtbot.waitUntil(lambda: w.height() == 576, timeout=2_000)
    assert inside_window(w, w.chat.send_button) and inside_window(w, w.statusBar())
