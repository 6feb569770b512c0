"""#31, the window's second pass: an answer the view follows while the user is at the end (and stops following
when they scroll up), line breaks kept as written, a wheel that scrolls the page instead of changing a
setting, and a question's Copy and Edit links from the moment it is sent."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, Qt
from PySide6.QtGui import QGuiApplication, QTextCursor, QTextDocument, QWheelEvent
from PySide6.QtWidgets import QApplication

from tests.ui.conftest import ask, shot


def wheel(widget, steps: int) -> None:
    """A mouse wheel over the widget's middle: steps > 0 turns it away from the user (up), < 0 towards (down)."""
    centre = widget.rect().center()
    QApplication.sendEvent(widget, QWheelEvent(QPointF(centre), QPointF(widget.mapToGlobal(centre)), QPoint(),
                                               QPoint(0, 120 * steps), Qt.NoButton, Qt.NoModifier,
                                               Qt.NoScrollPhase, False))


class PaintWatch(QObject):
    """Where the transcript's scroll bar stood each time the transcript was drawn: what the user saw."""

    def __init__(self, transcript):
        super().__init__(transcript)
        self.bar = transcript.verticalScrollBar()
        self.seen: list[tuple[int, int]] = []
        transcript.viewport().installEventFilter(self)

    def eventFilter(self, _watched, event) -> bool:
        if event.type() == QEvent.Paint:
            self.seen.append((self.bar.value(), self.bar.maximum()))
        return False


def long_chat(w, pairs: int = 15) -> int:
    cid = w.store.create("A long chat")
    for i in range(pairs):
        w.store.add_message(cid, "user", f"Question {i}: tell me about topic {i}.")
        w.store.add_message(cid, "assistant", f"Topic {i} is a long story.\n\nIt has two paragraphs, {i}.")
    w.chat.conversations.refresh(select=cid)
    w.chat.open_conversation(cid)
    return cid


def test_a_streaming_answer_is_followed_until_the_user_scrolls_up_and_jump_to_latest_resumes(qtbot, main_window,
                                                                                          tmp_path):
    w = main_window
    transcript = w.chat.transcript
    bar = transcript.verticalScrollBar()
    long_chat(w)
    qtbot.waitUntil(lambda: not transcript.loading, timeout=5_000)
    assert bar.maximum() > 0 and bar.value() == bar.maximum(), "a conversation opens at its end"
    w.chat.sampling_overrides = {"ignore_eos": True}  # an answer long enough to stream for a while
    start = bar.maximum()
    painted = PaintWatch(transcript)
    # Sampled, not greedy: a greedy answer this far into a chat holds every thread (app/engine/decoding/threads.py), which
    # a loaded machine makes slow, and this test is about the view, not the answer.
    ask(qtbot, w, "Write a poem about the sea.", max_tokens=96, temperature=0.7, wait=False)
    qtbot.waitUntil(lambda: transcript.flushes >= 3 and bar.maximum() > start, timeout=30_000)
    qtbot.wait(1)  # the turn's paint
    assert bar.value() == bar.maximum(), "the end of the answer is in view"
    assert painted.seen and all(value == maximum for value, maximum in painted.seen), painted.seen
    assert transcript.following and transcript.jump_button.isHidden()
    # The answer's "Assistant" header is in view, not only the question above it.
    doc = transcript.document()
    header = doc.find("Assistant", QTextCursor(doc.lastBlock()), QTextDocument.FindFlag.FindBackward)
    assert transcript.viewport().rect().contains(transcript.cursorRect(header).center())

    # The user scrolls up mid-answer: the view stays where they put it and offers the way back.
    wheel(transcript.viewport(), 3)
    put = bar.value()
    assert put < bar.maximum()
    assert not transcript.following and transcript.jump_button.isVisible()
    flushes = transcript.flushes
    qtbot.waitUntil(lambda: transcript.flushes >= flushes + 2 or not w.chat.generating, timeout=30_000)
    assert bar.value() == put and bar.value() < bar.maximum()
    shot(w, "chat-jump-to-latest", tmp_path)
    qtbot.waitUntil(lambda: not w.chat.generating, timeout=60_000)
    assert bar.value() == put, "the finished answer's Markdown does not move the view either"
    assert transcript.jump_button.isVisible()

    qtbot.mouseClick(transcript.jump_button, Qt.LeftButton)
    assert bar.value() == bar.maximum() and transcript.following and transcript.jump_button.isHidden()
    # Scrolling up, then back down to the end by hand, follows again too.
    wheel(transcript.viewport(), 2)
    assert not transcript.following
    wheel(transcript.viewport(), -50)
    assert bar.value() == bar.maximum() and transcript.following and transcript.jump_button.isHidden()


def test_an_answer_keeps_its_line_breaks_while_streaming_and_after(qtbot, idle_window):
    transcript = idle_window.chat.transcript
    poem = ("Roses are red,\nViolets are blue.\n\nSugar is sweet,\nAnd so are you.\n\n"
            "1. first\n   still the first\n2. second")
    transcript.begin_stream()
    first, rest = poem.split("\n\n", 1)
    for piece in (first, "\n\n", rest.split("\n\n")[0]):
        transcript.append_token(piece)
    transcript.flush()
    # The first stanza is done (a blank line followed it) and rendered as Markdown; the second is being written.
    streaming = transcript.toPlainText()
    assert "Roses are red,\nViolets are blue." in streaming and "Sugar is sweet,\nAnd so are you." in streaming
    transcript.append_token("\n\n" + rest.split("\n\n")[1])
    transcript.flush()
    transcript.end_stream()
    after = transcript.toPlainText()
    assert "Roses are red,\nViolets are blue.\nSugar is sweet,\nAnd so are you." in after, after
    # A line break inside a list item is a line break, not another numbered item.
    doc = transcript.document()
    items = [b.text() for b in blocks(doc) if b.textList() is not None]
    assert items == ["first\u2028still the first", "second"], items
    # The next message is not drawn inside the list the answer ended with (an empty "3." and a "4. You").
    transcript.append_message("user", "Thanks!")
    assert [b.text() for b in blocks(doc) if b.textList() is not None] == items
    assert transcript.toPlainText().endswith("second\n\nYou\nThanks!")


def blocks(doc):
    block = doc.begin()
    while block.isValid():
        yield block
        block = block.next()


def test_a_question_just_sent_shows_as_typed_with_copy_and_edit_at_once(qtbot, main_window):
    w = main_window
    transcript = w.chat.transcript
    question = "Two things:\n1. a\n2. b\nand *this* line"
    ask(qtbot, w, question, max_tokens=16, wait=False)
    # At once, while the answer is still to come: the question as typed, its links in its header.
    text = transcript.toPlainText()
    assert question in text, text
    assert not [b.text() for b in blocks(transcript.document()) if b.textList() is not None]
    hrefs = anchors(transcript.document())
    assert any(h.startswith("message-copy:") for h in hrefs) and any(h.startswith("edit:") for h in hrefs)
    qtbot.waitUntil(lambda: not w.chat.generating, timeout=60_000)
    # Copy, clicked where it is drawn, copies the question and says so.
    cursor = transcript.document().find("Copy")
    assert cursor.charFormat().anchorHref().startswith("message-copy:")
    cursor.setPosition(cursor.selectionStart() + 1)
    QGuiApplication.clipboard().clear()
    transcript.ensureCursorVisible()
    qtbot.mouseClick(transcript.viewport(), Qt.LeftButton, pos=transcript.cursorRect(cursor).center())
    qtbot.waitUntil(lambda: QGuiApplication.clipboard().text() == question, timeout=2_000)
    assert "Copied" in w.statusBar().currentMessage()


def anchors(doc) -> list[str]:
    found = []
    for block in blocks(doc):
        it = block.begin()
        while not it.atEnd():
            href = it.fragment().charFormat().anchorHref()
            if href:
                found.append(href)
            it += 1
    return found


def test_the_wheel_over_a_setting_scrolls_the_page_and_leaves_the_setting(qtbot, idle_window):
    w = idle_window
    w.resize(1024, 700)
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: w.models.load_settings.trained_ctx is not None, timeout=10_000)
    settings = w.models.load_settings
    flash = settings.flash
    assert flash.isEnabled() and not flash.hasFocus()
    before = flash.currentText()
    pane = next(p for p in ancestors(flash) if hasattr(p, "verticalScrollBar"))
    bar = pane.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=2_000)  # at 1024x700 the load settings scroll
    bar.setValue(0)
    wheel(flash, -1)
    assert flash.currentText() == before
    assert bar.value() > 0, "the page scrolled instead"
    # The same for a spin box and for the sampling panel beside the chat.
    threads = settings.threads
    value = threads.value()
    wheel(threads, 1)
    wheel(threads, -1)
    assert threads.value() == value
    temperature = w.chat.sampling.temperature
    value = temperature.value()
    wheel(temperature, -2)
    assert temperature.value() == value
    # Once the user is in the control (clicked, or Tab), the wheel is theirs to change it with.
    flash.setFocus()
    qtbot.waitUntil(flash.hasFocus, timeout=1_000)
    wheel(flash, -1)
    assert flash.currentText() != before


def ancestors(widget):
    parent = widget.parentWidget()
    while parent is not None:
        yield parent
        parent = parent.parentWidget()
