"""The conversation as one read-only rich-text document.

Over 600 lines because the document's one job, rendering and updating messages in place without re-rendering
the whole, holds the streaming answer, the finished messages and their headers together (the Markdown, the
answer's blocks and the following of the end are apart: chat_markdown.py, answer_blocks.py, following.py).

Finished messages are rendered once as Markdown, with code blocks in a
monospace box and a "Copy code" link. While an answer streams, each paragraph
(or code block) is rendered as Markdown once it is complete, so the answer
does not show raw and then reflow at its end; only the paragraph being
written is plain text. A message's header carries its actions as
links (Copy, Edit or Regenerate, < 2/3 > for its versions); a click is reported as
`action_requested(action, message_id)` for the chat page to carry out. The answer in progress arrives token by
token: each piece is appended as plain text when it arrives, and only when the answer ends is that one message
re-rendered as Markdown. Pieces arrive merged already: the engine (and a remote backend) merges tokens into at
most one event per STREAM_INTERVAL_MS (app/ui/bridge/bridge_signals.py), the one batching stage between a token and the
screen; a second timer here held each merged piece up to another 80 ms. Nothing ever re-renders the whole transcript, so a long
conversation costs nothing per token.

The view follows the answer while the user is at the bottom (app/ui/chat/following.py). Answers are chat
Markdown (app/ui/chat/chat_markdown.py); the user's own messages are shown as they were typed.

A reasoning model's thinking (`<think>…</think>`, split by app/core/chats/reasoning.py, the API's parser) is
shown apart from the answer: in grey while it streams, then as a collapsed "Thinking" block that says how long
it took; its link opens and closes it in place (a frame of its own, rewritten alone).

An answer with tool calls (MCP tools, app/tools) shows each call as a block of its own where the model made
it: the server and tool, how it went (waiting for the user, running, allowed, denied, stopped, an error), and,
open, its arguments and its result. The block's link opens and closes it in place, like a thinking block; a
call of the answer in progress is rewritten in place as its approval and result arrive (`update_call`).

Opening a conversation (`show_messages`) renders its messages a few at a time
between events (RENDER_BUDGET_MS of work per turn), always appending at the end
(which keeps Qt's layout incremental; inserting above costs a relayout of all
below), so a 50,000-token chat opens without freezing the window. Whatever
arrives meanwhile (a new message, the answer's tokens) queues behind it. While a
long one fills in, its last messages are shown at once in an opening view laid
over the transcript (#55 F: the view, following the end as messages were added
oldest first, raced through the whole chat for 1-2 s before it settled).
"""

from __future__ import annotations

import html
import json
import re
import time

from PySide6.QtCore import QEvent, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (QColor, QFont, QGuiApplication, QImage, QTextBlockFormat, QTextCharFormat, QTextCursor,
                           QTextFrameFormat, QTextTable)
from PySide6.QtWidgets import QPushButton, QTextBrowser

from app.core.chats.reasoning import ReasoningSplitter, split
from app.ui.chat.icons import ICON_SCHEME, icon_image, with_icons
from app.ui.chat.answer_blocks import CallBlock, Thought, call_state, header_links, thinking_label
from app.ui.chat.chat_markdown import LINE_BREAK, chat_markdown, paragraph_gap, split_code
from app.ui.chat.following import Following

# About 12 appends a second: smooth to read, and each append costs the window ~1.5 ms of CPU (inserting and
# laying out the growing paragraph), CPU the engine's threads need; at 40 ms the window cost generation about
# 1% more than at 60 (hearth bench gui).
FENCE_LINE = re.compile(r"^```", re.M)
RENDER_BUDGET_MS = 12  # rendering work per event-loop turn while a long conversation fills in
# The opening view shows the conversation's last messages up to about this many characters (a screen or two),
# and at most OPENING_MOST messages: rendered twice, so kept small.
OPENING_CHARS = 4000
OPENING_MOST = 40
STREAM = object()  # the place of the answer in progress in the backlog
ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System", "error": "Error"}
THOUGHT_GREY = "#9ca3af"


# The header links that act on a whole message (app/ui/chat/message_notes.py writes them).
MESSAGE_ACTIONS = ("message-copy", "edit", "regenerate", "continue", "prev", "next")
MEDIA_SCHEME = "hearth-media"  # a question's image, drawn from the chat store by its digest (media_source)
MEDIA_THUMB = 160  # a question's image in the transcript, in pixels; a click opens it larger


def _links_of(block) -> list[tuple[str, str]]:
    """The links in one block of the document, in order: (its text, its href)."""
    found: list[tuple[str, str]] = []
    it = block.begin()
    while not it.atEnd():
        fragment = it.fragment()
        href = fragment.charFormat().anchorHref()
        if href:
            if found and found[-1][1] == href:  # one link drawn in several fragments
                found[-1] = (found[-1][0] + fragment.text(), href)
            else:
                found.append((fragment.text(), href))
        it += 1
    return [(text.strip() or href, href) for text, href in found]


class Transcript(Following, QTextBrowser):
    message_copied = Signal(str)
    # (action, message id): "copy", "edit", "regenerate", "continue", "prev", "next"
    action_requested = Signal(str, int)
    source_requested = Signal(int, int)  # (answer id, source number): an answer's [n] link
    example_chosen = Signal(str)  # the welcome's example prompt the user chose
    media_requested = Signal(str)  # a question's image or sound clicked, by its digest: shown larger

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setOpenLinks(False)
        self.media_source = None  # digest -> the medium's bytes (the chat store's media_data), set by the chat page
        self._media_images: dict[str, QImage] = {}  # the thumbnails shown, by digest
        # One Tab stop (#55 B3): every link was a stop of its own, about five a message, so 1,250 presses passed a
        # 500-message chat. The arrow keys move a caret through the text, and the context-menu key (or Shift+F10)
        # offers the actions of the message at the caret (MESSAGE_ACTIONS) and the links of its paragraph.
        self.setTextInteractionFlags(Qt.TextSelectableByMouse | Qt.LinksAccessibleByMouse | Qt.TextSelectableByKeyboard)
        self.setOpenExternalLinks(False)
        self.anchorClicked.connect(self._on_anchor)
        self.setUndoRedoEnabled(False)
        self.document().setDocumentMargin(12)
        self._code: list[str] = []
        self.thoughts: list[Thought] = []  # the thinking blocks shown, by the index their link names
        self.calls: dict[str, CallBlock] = {}  # the tool-call blocks shown, by the call's id
        self._stream_calls: list[dict] = []  # the calls of the answer in progress, in order
        self._splitter: ReasoningSplitter | None = None  # the answer in progress's thinking and content
        self._think_started: float | None = None
        self._first_token_at: float | None = None
        self.stream_thought_s: float | None = None  # how long the answer in progress thought
        self._pending: list[str] = []
        self._stream_block = None  # the answer's first block (a handle: it follows edits above it)
        self._segment_block = None  # where the answer's text after its last tool call begins
        self._stream_header = None  # the block of the answer's header
        self._tail_block = None  # where the answer's plain (not yet Markdown) text begins
        self._tail_text = ""  # that text: the paragraph being written
        self._stream_queued = False  # the answer waits behind the backlog
        # Messages still to render, oldest first; a new message or answer waits behind them.
        self._backlog: list = []
        self._backlog_timer = QTimer(self, singleShot=True, interval=0, timeout=self._render_backlog)
        self._stream_text: list[str] = []
        self._stream_thoughts = 0
        self._pending_since: float | None = None  # when the oldest piece not yet shown arrived
        self.delays_ms: list[float] = []  # per append, how long its oldest piece waited: for `hearth bench gui`
        self._plain = QTextCharFormat()
        self._code_bg_drawn = self._code_bg()  # the code blocks' background in the document, for a theme switch
        self._link_drawn = QColor(self.palette().link().color())  # the links' colour in the document, likewise
        self.following = True  # the view keeps the end in sight as text arrives
        self._moving = 0  # > 0 while the transcript itself moves the text: not the user scrolling
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_scrolled)
        self.jump_button = QPushButton("Jump to latest ↓", self)
        self.jump_button.setObjectName("jumpToLatest")
        self.jump_button.setToolTip("Scroll to the end and follow the answer again")
        self.jump_button.setCursor(Qt.PointingHandCursor)
        # Never the focus: hiding a focused button hands the focus to the transcript, whose text cursor (at the
        # top) Qt then scrolls into view.
        self.jump_button.setFocusPolicy(Qt.NoFocus)
        self.jump_button.clicked.connect(self.jump_to_latest)
        self.jump_button.hide()
        self.flushes = 0  # counted for tests and the benchmark: appends that touched the document
        self.full_renders = 0  # times the whole transcript was (re)built: opening a conversation, never per token
        self.welcoming = False  # an empty chat's welcome is shown (show_welcome)
        self._kept_view: int | None = None  # where the view goes once a re-shown conversation is all there
        # Laid over the transcript while a long conversation fills in: its last messages, at their end.
        self.opening_view: Transcript | None = None
        self.examples: list[str] = []  # its example prompts, by the number their links carry

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if self.opening_view is not None:
            self.opening_view.setGeometry(self.rect())

    # --- whole messages -------------------------------------------------
    def clear_all(self) -> None:
        self.welcoming = False
        self._close_opening_view()
        self._backlog_timer.stop()
        self._backlog.clear()
        self._pending.clear()
        self._pending_since = None
        self._stream_text.clear()
        self._stream_block = self._tail_block = None
        self._tail_text = ""
        self._stream_queued = False
        self._code.clear()
        self.thoughts.clear()
        self.calls.clear()
        self._stream_calls = []
        self._splitter = None
        self.clear()
        self._media_images.clear()  # the document that showed them is gone
        self.jump_to_latest()  # a conversation opens at its end

    def show_welcome(self, welcome) -> None:
        """An empty chat's welcome (app/ui/chat/welcome.py): what to do, what the model is good and bad at, and
        example prompts whose links (example:<n>) ask for them to be typed. The first message replaces it."""
        self.clear_all()
        parts = [f"<h3>{html.escape(welcome.title)}</h3>"]
        parts += [f"<p>{html.escape(line)}</p>" for line in welcome.lines]
        if welcome.examples:
            parts.append("<p>Try one:</p><ul>" + "".join(
                f"<li><a href='example:{n}' style='text-decoration:none'>{html.escape(text)}</a></li>"
                for n, text in enumerate(welcome.examples)) + "</ul>")
        self.examples = list(welcome.examples)
        self.insertHtml("".join(parts))
        self.welcoming = True

    def _end_welcome(self) -> None:
        if self.welcoming:
            self.welcoming = False
            self.clear()

    def show_messages(self, messages: list[tuple], keep_view: bool = False) -> None:
        """Show a conversation [(role, text, note[, links])], rendered a few messages per event-loop turn.
        keep_view: the same conversation again (another version paged to): the view stays where the user was
        instead of jumping to the end (#55 F: paging to 1/2 took the pager out of sight)."""
        kept = self.verticalScrollBar().value() if keep_view else None
        self.clear_all()
        self.full_renders += 1
        self._kept_view = kept
        if kept is not None:
            self._set_following(False)
        self._backlog = list(messages)
        if kept is None:
            self._open_at_end(self._backlog)
        # From the next event-loop turn on: the turn that opens the conversation does enough already.
        self._backlog_timer.start()

    def _open_at_end(self, messages: list) -> None:
        """A conversation longer than a screen or two: its last messages, shown now in a view of their own laid
        over this one, which fills in beneath it unseen (and unpainted) and is shown when it is all there."""
        tail, chars = [], 0
        for item in reversed(messages):
            if chars >= OPENING_CHARS or len(tail) >= OPENING_MOST or item is STREAM:
                break
            tail.append(item)
            chars += len(item[1])
        if len(tail) == len(messages):
            return  # short enough to fill in at once: nothing would race
        view = self.opening_view = Transcript(self)
        view.setFocusPolicy(Qt.NoFocus)  # a picture of what comes: the keyboard stays with the transcript
        view.setAccessibleName("Opening the chat")
        view.media_source = self.media_source
        view.setGeometry(self.rect())
        with view._moving_text():
            for item in reversed(tail):
                view._append(*item)
        view.show()
        view.raise_()
        self.jump_button.raise_()
        self.viewport().setUpdatesEnabled(False)  # nobody sees it fill in: spare the paints

    def _close_opening_view(self) -> None:
        if self.opening_view is not None:
            self.viewport().setUpdatesEnabled(True)
            self.opening_view.hide()
            self.opening_view.deleteLater()
            self.opening_view = None

    @property
    def loading(self) -> bool:
        """Messages of the open conversation are still being rendered."""
        return bool(self._backlog)

    def _render_backlog(self) -> None:
        started = time.perf_counter()
        done = 0
        with self._moving_text():  # a conversation opens at its end and follows it while the rest fills in
            while done < len(self._backlog) and (time.perf_counter() - started) * 1000 < RENDER_BUDGET_MS:
                item = self._backlog[done]
                done += 1
                if item is STREAM:
                    self._start_stream()
                else:
                    self._append(*item)
        del self._backlog[:done]
        if self._backlog:
            self._backlog_timer.start()
            return
        if self.opening_view is not None:  # all there: at its end, the same last messages in the same place
            # Laid out to its end now (Qt lays a long document out in steps after an insert), so that the end
            # shown is the end, and not followed again in the next steps' jumps.
            layout = self.document().documentLayout()
            layout.blockBoundingRect(self.document().lastBlock())
            self._close_opening_view()
            self._scroll_to_end()
        if self._pending:
            self.flush()
        if not self._backlog and self._kept_view is not None:  # all there: back where the user was
            self.verticalScrollBar().setValue(self._kept_view)
            self._kept_view = None

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.End)
        return cursor

    def _cleared_from(self, block) -> QTextCursor:
        """A cursor at block, everything from it to the end removed (what streamed, to be written again)."""
        cursor = QTextCursor(self.document())
        cursor.setPosition(block.position())
        cursor.movePosition(QTextCursor.End, QTextCursor.KeepAnchor)
        cursor.removeSelectedText()
        return cursor

    def _header(self, cursor: QTextCursor, role: str, note: str = "", links: list | None = None) -> None:
        color = {"user": "#3b82f6", "assistant": "#10b981", "error": "#ef4444"}.get(role, "#9ca3af")
        extra = f" <span style='color:#9ca3af; font-weight:normal'>{with_icons(html.escape(note))}</span>" \
            if note else ""
        actions = f"&nbsp;&nbsp;&nbsp;{header_links(links)}" if links else ""
        cursor.insertHtml(f"<b style='color:{color}'>{ROLE_NAMES.get(role, role)}</b>{extra}{actions}")
        # A fresh block with plain formats: the body must not inherit the header's bold colour.
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())

    def _render_answer(self, cursor: QTextCursor, text: str, thought_s: float | None = None,
                       calls: list[dict] | None = None) -> None:
        """An answer: its tool calls (each after what the model said before it), its thinking as a closed block
        (how long it took, when known), then its content."""
        self._render_calls(cursor, calls or [])
        parts = split(text)
        if parts.reasoning or parts.thinking:
            self._thought_block(cursor, parts.reasoning, thought_s)
        self._render_body(cursor, parts.content)

    def _thought_block(self, cursor: QTextCursor, text: str, seconds: float | None) -> None:
        frame_format = QTextFrameFormat()
        frame_format.setBottomMargin(paragraph_gap())
        frame = cursor.insertFrame(frame_format)
        thought = Thought(frame, text, seconds)
        self.thoughts.append(thought)
        self._write_thought(cursor, len(self.thoughts) - 1)
        cursor.movePosition(QTextCursor.End)

    def _render_calls(self, cursor: QTextCursor, calls: list[dict]) -> None:
        for call in calls:
            said = split(call.get("said") or "").content
            if said.strip():
                self._render_body(cursor, said)
                cursor.movePosition(QTextCursor.End)
                cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            frame_format = QTextFrameFormat()
            frame_format.setBorder(1)
            frame_format.setBorderBrush(QColor(THOUGHT_GREY))
            frame_format.setPadding(6)
            frame_format.setBottomMargin(paragraph_gap())
            frame = cursor.insertFrame(frame_format)
            key = str(call.get("id") or f"call-{len(self.calls)}")
            before = self.calls.get(key)
            # Open while it waits or has just run in this answer; a reopened chat shows its calls closed.
            expanded = before.expanded if before is not None else call.get("state", "done") != "done"
            self.calls[key] = CallBlock(frame, dict(call), expanded)
            self._write_call(cursor, key)
            cursor.movePosition(QTextCursor.End)

    def _write_call(self, cursor: QTextCursor, key: str) -> None:
        block = self.calls[key]
        call = block.call
        failed = call.get("is_error") and call.get("state", "done") == "done"
        color = "#ef4444" if failed and call.get("decision") not in ("deny", "stopped") else THOUGHT_GREY
        cursor.insertHtml(f"<a href='toolcall:{html.escape(key)}' style='color:{THOUGHT_GREY}; "
                          f"text-decoration:none'>{'▾' if block.expanded else '▸'} Tool call</a>&nbsp; "
                          f"<b>{html.escape(str(call.get('server', '')))} · {html.escape(str(call.get('tool', '')))}"
                          f"</b>&nbsp; <span style='color:{color}'>{html.escape(call_state(call))}</span>")
        if not block.expanded:
            return
        mono = QTextCharFormat()
        font = self.monospace()
        if self.document().defaultFont().pointSizeF() > 0:  # the body's size: Qt's monospace came out larger
            font.setPointSizeF(self.document().defaultFont().pointSizeF())
        mono.setFont(font)
        label = QTextCharFormat()
        label.setForeground(QColor(THOUGHT_GREY))
        arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False, indent=2)
        cursor.insertBlock(QTextBlockFormat(), label)
        cursor.insertText("Arguments", label)
        cursor.insertBlock(QTextBlockFormat(), mono)
        cursor.insertText(arguments.replace("\n", LINE_BREAK), mono)
        if call.get("state", "done") != "done":
            return
        cursor.insertBlock(QTextBlockFormat(), label)
        cursor.insertText("Result" + (f" ({call['cut']})" if call.get("cut") else ""), label)
        result = mono if not failed else QTextCharFormat(mono)
        if failed:
            result.setForeground(QColor(color))
        cursor.insertBlock(QTextBlockFormat(), result)
        cursor.insertText(str(call.get("result") or "(empty)").strip("\n").replace("\n", LINE_BREAK), result)

    def _rewrite_frame(self, frame, write) -> None:
        """A block's frame (a thinking or a tool call) emptied and written again by write(cursor), alone."""
        with self._moving_text():
            cursor = QTextCursor(self.document())
            cursor.setPosition(frame.firstPosition())
            cursor.setPosition(frame.lastPosition(), QTextCursor.KeepAnchor)
            cursor.removeSelectedText()
            cursor.setCharFormat(QTextCharFormat())
            write(cursor)

    def _rewrite_call(self, key: str) -> None:
        self._rewrite_frame(self.calls[key].frame, lambda cursor: self._write_call(cursor, key))

    def toggle_call(self, key: str) -> None:
        """Open or close a tool call's block in place: only its frame is rewritten."""
        if key in self.calls:
            self.calls[key].expanded = not self.calls[key].expanded
            self._rewrite_call(key)

    def update_call(self, call: dict) -> None:
        """A call of the answer in progress changed (allowed, denied, answered): its block is rewritten."""
        key = str(call.get("id") or "")
        for i, kept in enumerate(self._stream_calls):
            if kept.get("id") == key:
                self._stream_calls[i] = dict(call)
        if key in self.calls:
            self.calls[key].call = dict(call)
            self._rewrite_call(key)

    def stream_call(self, call: dict) -> None:
        """A tool call of the answer in progress: what the model wrote before it becomes the call's "said" text
        (as it will be kept), the block follows it, and the answer goes on below."""
        self.flush()
        self._pending.clear()
        self._stream_calls.append(dict(call))
        self._stream_text = []
        self._splitter = ReasoningSplitter(False)
        if self._stream_block is None:  # still behind the backlog: end_stream renders the calls
            return
        with self._moving_text():
            cursor = self._cleared_from(self._stream_block)
            cursor.setCharFormat(QTextCharFormat())
            del self.thoughts[self._stream_thoughts:]
            self._render_calls(cursor, self._stream_calls)
            cursor.movePosition(QTextCursor.End)
            self._segment_block = self._tail_block = cursor.block()
            self._tail_text = ""

    def _write_thought(self, cursor: QTextCursor, index: int) -> None:
        """The block's link (and, open, its text) at cursor, inside its frame."""
        thought = self.thoughts[index]
        cursor.insertHtml(f"<a href='thought:{index}' style='color:{THOUGHT_GREY}'>"
                          f"{html.escape(thinking_label(thought.seconds, thought.expanded))}</a>")
        if thought.expanded:
            grey = QTextCharFormat()
            grey.setForeground(QColor(THOUGHT_GREY))
            cursor.insertBlock(QTextBlockFormat(), grey)
            cursor.insertText(thought.text.strip("\n").replace("\n", LINE_BREAK), grey)

    def toggle_thought(self, index: int) -> None:
        """Open or close a thinking block in place: only its frame is rewritten."""
        thought = self.thoughts[index]
        thought.expanded = not thought.expanded
        self._rewrite_frame(thought.frame, lambda cursor: self._write_thought(cursor, index))

    def _render_body(self, cursor: QTextCursor, text: str) -> None:
        for kind, lang, body in split_code(text):
            if kind == "code":
                index = len(self._code)
                self._code.append(body)
                label = html.escape(lang) + " · " if lang else ""
                # Wrapped in its own box (pre-wrap), not <pre>: a long line in <pre> widened the whole
                # transcript, which then scrolled sideways and took the Copy link out of view.
                cursor.insertHtml(
                    f"<table width='100%' cellpadding='8' cellspacing='0' bgcolor='{self._code_bg()}'>"
                    f"<tr><td bgcolor='{self._code_bg()}'>"
                    f"<div align='right'><span style='color:#9ca3af'>{label}</span>"
                    f"<a href='copy:{index}'>Copy code</a></div>"
                    f"<p style='font-family:monospace; white-space:pre-wrap'>{html.escape(body)}</p></td></tr></table>")
                cursor.movePosition(QTextCursor.End)
            elif body.strip():
                cursor.insertFragment(chat_markdown(body.strip("\n")))

    def _code_bg(self) -> str:
        return "#1f2430" if self.palette().base().color().lightness() < 128 else "#f3f4f6"

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.PaletteChange:
            self._restyle_code_blocks()
            self._restyle_links()

    def _restyle_links(self) -> None:
        """The theme changed: the links drawn take the new theme's link colour at once (Qt's HTML import gives
        each link the palette's colour of its moment; an open transcript kept the light theme's dark blue on the
        dark background until another chat was opened, #49.18)."""
        new = self.palette().link().color()
        old, self._link_drawn = self._link_drawn, QColor(new)
        if new == old:
            return
        paint = QTextCharFormat()
        paint.setForeground(new)
        doc = self.document()
        self._paint_fragments(doc.begin(), doc.characterCount(),
                              lambda fmt: fmt.isAnchor() and fmt.foreground().color() == old, paint)

    def _restyle_code_blocks(self) -> None:
        """The theme changed: the code blocks drawn take the new background in place (light code on the old
        light box was unreadable), with no re-render and no jump of the view, also mid-answer."""
        new, old = self._code_bg(), QColor(self._code_bg_drawn)
        if new == self._code_bg_drawn:
            return
        self._code_bg_drawn = new
        for frame in self.document().rootFrame().childFrames():
            if not isinstance(frame, QTextTable) or frame.format().background().color() != old:
                continue  # a Markdown table has no background of its own
            table_format = frame.format()
            table_format.setBackground(QColor(new))
            frame.setFormat(table_format)
            for row in range(frame.rows()):
                for column in range(frame.columns()):
                    cell = frame.cellAt(row, column)
                    cell_format = cell.format()
                    cell_format.setBackground(QColor(new))
                    cell.setFormat(cell_format)
                    self._restyle_range(cell.firstPosition(), cell.lastPosition(), old, QColor(new))

    def _restyle_range(self, start: int, end: int, old: QColor, new: QColor) -> None:
        """The blocks and the text between two positions that have the old background get the new one (Qt's
        HTML import gives a cell's paragraphs and code text the cell's colour too)."""
        doc = self.document()
        cursor = QTextCursor(doc)
        block = doc.findBlock(start)
        while block.isValid() and block.position() <= end:
            if block.blockFormat().background().color() == old:
                block_format = block.blockFormat()
                block_format.setBackground(new)
                cursor.setPosition(block.position())
                cursor.setBlockFormat(block_format)
            block = block.next()
        paint = QTextCharFormat()
        paint.setBackground(new)
        self._paint_fragments(doc.findBlock(start), end, lambda fmt: fmt.background().style() != Qt.NoBrush
                              and fmt.background().color() == old, paint)

    def _paint_fragments(self, block, end: int, matches, paint: QTextCharFormat) -> None:
        """Merge paint into every text fragment from block up to position end whose format matches."""
        cursor = QTextCursor(self.document())
        while block.isValid() and block.position() <= end:
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                if matches(fragment.charFormat()):
                    cursor.setPosition(fragment.position())
                    cursor.setPosition(fragment.position() + fragment.length(), QTextCursor.KeepAnchor)
                    cursor.mergeCharFormat(paint)
                it += 1
            block = block.next()

    def _separate(self, cursor: QTextCursor) -> None:
        if not self.document().isEmpty():
            # Plain blocks: a message that ends in a list (or a heading) must not lend the next its format
            # ("1. a" and "2. b" went on as an empty "3." and a "4. Assistant").
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())

    def _write_message(self, cursor: QTextCursor, role: str, text: str, note: str, links=None,
                       thought_s: float | None = None, calls: list[dict] | None = None,
                       media: list[dict] | None = None) -> None:
        self._header(cursor, role, note, links)
        if role == "error":
            cursor.insertHtml(f"<span style='color:#ef4444'>{html.escape(text)}</span>")
        elif role == "user":  # as typed: its line breaks, its "1." and its asterisks
            if media:
                self._write_media(cursor, media)
            cursor.insertText(text.strip("\n"), self._plain)
        elif role == "assistant":
            self._render_answer(cursor, text, thought_s, calls)
        else:
            self._render_body(cursor, text)

    def append_message(self, role: str, text: str, note: str = "", links: list | None = None,
                       thought_s: float | None = None, calls: list[dict] | None = None,
                       media: list[dict] | None = None) -> None:
        if self._backlog:
            self._backlog.append((role, text, note, links, thought_s, calls, media))
        else:
            with self._moving_text():
                self._append(role, text, note, links, thought_s, calls, media)
            self.jump_to_latest()  # a new message: the user sent it, or needs to read it

    def _append(self, role: str, text: str, note: str, links: list | None = None,
                thought_s: float | None = None, calls: list[dict] | None = None,
                media: list[dict] | None = None) -> None:
        self._end_welcome()
        cursor = self._end_cursor()
        self._separate(cursor)
        self._write_message(cursor, role, text, note, links, thought_s, calls, media)

    def _write_media(self, cursor: QTextCursor, media: list[dict]) -> None:
        """A question's images as thumbnails (a click opens one larger: media_requested) and its sounds by name,
        above its text, in the order attached."""
        pieces = []
        for ref in media:
            digest, name = html.escape(str(ref.get("digest", ""))), html.escape(str(ref.get("name") or ref.get("kind")))
            if ref.get("kind") == "image":
                pieces.append(f"<a href='media:{digest}' title='{name}'><img src='{MEDIA_SCHEME}:{digest}' "
                              f"alt='{name}'></a>")
            else:
                pieces.append(f"<a href='media:{digest}'>Sound: {name}</a>")
        cursor.insertHtml("&nbsp;&nbsp;".join(pieces))
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())

    # --- the answer in progress -----------------------------------------
    def begin_stream(self, opened: bool = False) -> None:
        """opened: the prompt opened the thinking, so the answer starts inside it, without its <think>."""
        self._stream_text = []
        self._stream_calls = []
        self._splitter = ReasoningSplitter(opened)
        self._think_started = self.stream_thought_s = self._first_token_at = None
        if self._backlog:
            self._backlog.append(STREAM)
            self._stream_queued = True
        else:
            with self._moving_text():
                self._start_stream()

    def _start_stream(self) -> None:
        self._end_welcome()
        self._stream_queued = False
        cursor = self._end_cursor()
        self._separate(cursor)
        self._stream_header = cursor.block()  # rewritten with the message's links when the answer ends
        self._stream_thoughts = len(self.thoughts)  # the answer's own thinking block comes after these
        self._header(cursor, "assistant")
        self._stream_block = cursor.block()
        self._segment_block = self._tail_block = cursor.block()
        self._tail_text = ""

    @property
    def streaming(self) -> bool:
        return self._stream_block is not None or self._stream_queued

    def append_token(self, text: str) -> None:
        if self._first_token_at is None:
            self._first_token_at = time.monotonic()
        if not self._pending:
            self._pending_since = time.perf_counter()
        self._pending.append(text)
        self._stream_text.append(text)
        self.flush()  # at once: the piece was merged upstream; behind a backlog it waits for the backlog's end

    def flush(self) -> None:
        if not self._pending or self._backlog:  # the backlog flushes when it is done
            return
        chunk = "".join(self._pending)
        self._pending.clear()
        if self._pending_since is not None:
            self.delays_ms.append((time.perf_counter() - self._pending_since) * 1000)
            self._pending_since = None
        with self._moving_text():
            chunk = self._thinking_part(chunk)
            if chunk:
                # Line breaks, not blocks: the paragraph being written is one block, as its Markdown will be.
                self._end_cursor().insertText(chunk.replace("\n", LINE_BREAK), self._plain)
                self._tail_text += chunk
                if "\n\n" in self._tail_text[-len(chunk) - 1:]:  # a blank line arrived (perhaps across two chunks)
                    self._render_finished_paragraphs()
                if "`" in self._tail_text and len(FENCE_LINE.findall(self._tail_text)) % 2:
                    self._show_open_fence()
        self.flushes += 1

    def _thinking_part(self, chunk: str) -> str:
        """Show a chunk's thinking (grey, plain, while it streams; a closed block once it ends); returns the
        chunk's content, for the answer's own text."""
        splitter = self._splitter
        if splitter is None or self._tail_block is None:
            return chunk
        was_thinking = splitter.thinking
        reasoning, content = splitter.feed(chunk)
        began = splitter.seen_thinking and self._think_started is None
        if began:  # timed from the answer's first token: a reasoning model thinks first
            self._think_started = self._first_token_at or time.monotonic()
        if not (was_thinking or began):
            return content
        if splitter.thinking:  # still thinking: shown as it comes
            cursor = self._end_cursor()
            if began:
                cursor.insertHtml(f"<span style='color:{THOUGHT_GREY}'><i>"
                                  f"{html.escape(thinking_label(None, True, True))}</i></span>")
                cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            if reasoning:
                grey = QTextCharFormat()
                grey.setForeground(QColor(THOUGHT_GREY))
                cursor.insertText(reasoning.replace("\n", LINE_BREAK), grey)
            return ""
        # It ended: a closed block in place of what streamed, and the answer after it.
        self.stream_thought_s = time.monotonic() - self._think_started
        cursor = self._cleared_from(self._segment_block)  # after the answer's tool calls, if it made any
        cursor.setCharFormat(QTextCharFormat())
        self._thought_block(cursor, splitter.reasoning, self.stream_thought_s)
        cursor.movePosition(QTextCursor.End)
        self._tail_block = cursor.block()
        self._tail_text = ""
        return splitter.content  # what came before the thinking, and after it so far

    def _render_finished_paragraphs(self) -> None:
        """Render the answer's complete paragraphs as Markdown (once each, when a blank line ends them),
        leaving the paragraph being written plain; never inside an open code fence."""
        tail = self._tail_text
        cut = tail.rfind("\n\n")
        while cut > 0 and len(FENCE_LINE.findall(tail, 0, cut)) % 2:
            cut = tail.rfind("\n\n", 0, cut)  # that blank line is inside a code block still being written
        if cut <= 0 or self._tail_block is None:
            return
        done, rest = tail[:cut], tail[cut:].lstrip("\n")
        cursor = self._cleared_from(self._tail_block)
        self._render_body(cursor, done)
        cursor.movePosition(QTextCursor.End)
        gap = QTextBlockFormat()
        gap.setTopMargin(paragraph_gap())  # where the paragraph's Markdown will put it: nothing moves at the end
        cursor.insertBlock(gap, self._plain)
        self._tail_block = cursor.block()
        cursor.insertText(rest.replace("\n", LINE_BREAK), self._plain)
        self._tail_text = rest

    def _show_open_fence(self) -> None:
        """A code block still being written (#55 F: its ``` showed raw until it closed): the text before it plain,
        the fence line left out and the code in the code font on the code background, as it will end up. Only the
        paragraph being written is redrawn (from _tail_text, which keeps the fence); the closing fence and the
        blank line after it then render the whole block as Markdown."""
        if self._tail_block is None:
            return
        tail = self._tail_text
        start = [m.start() for m in FENCE_LINE.finditer(tail)][-1]
        line_end = tail.find("\n", start)
        before, code = tail[:start], tail[line_end + 1:] if line_end >= 0 else ""
        cursor = self._cleared_from(self._tail_block)
        cursor.setCharFormat(self._plain)
        if before.strip("\n"):
            cursor.insertText(before.rstrip("\n").replace("\n", LINE_BREAK), self._plain)
            cursor.insertText(LINE_BREAK, self._plain)
        mono = QTextCharFormat()
        mono.setFont(self.monospace())
        mono.setBackground(QColor(self._code_bg()))
        cursor.insertText(code.replace("\n", LINE_BREAK), mono)

    def stream_text(self) -> str:
        return "".join(self._stream_text)

    def end_stream(self, note: str = "", links: list | None = None) -> str:
        """Render the finished answer as Markdown in place, its header with links; returns its text."""
        self._pending.clear()
        self._pending_since = None
        text = self.stream_text()
        if self._stream_queued:  # still behind the backlog: it becomes an ordinary message there
            self._backlog[self._backlog.index(STREAM)] = ("assistant", text, note, links, self.stream_thought_s,
                                                          self._stream_calls)
            self._stream_queued = False
            self._stream_text = []
            self._stream_calls = []
            return text
        if self._stream_block is None:
            return text
        with self._moving_text():
            cursor = self._cleared_from(self._stream_header)
            del self.thoughts[self._stream_thoughts:]  # its block was in what was just removed
            # The note (tokens, speed, why it stopped) in the header, where a reopened conversation shows it.
            self._header(cursor, "assistant", note, links)
            if self._think_started is not None and self.stream_thought_s is None:  # it ended still thinking
                self.stream_thought_s = time.monotonic() - self._think_started
            self._render_answer(cursor, text, self.stream_thought_s, self._stream_calls)
        self._stream_calls = []
        self._splitter = None
        self._stream_block = self._tail_block = None
        self._tail_text = ""
        self._stream_text = []
        return text

    def _on_anchor(self, url: QUrl) -> None:
        action, _, target = url.toString().partition(":")
        if action == "thought" and target.isdigit() and int(target) < len(self.thoughts):
            self.toggle_thought(int(target))
        elif action == "toolcall":
            self.toggle_call(target)
        elif action == "source":  # source:<answer id>.<n>
            answer, _, n = target.partition(".")
            if answer.isdigit() and n.isdigit():
                self.source_requested.emit(int(answer), int(n))
        elif action == "media" and target:
            self.media_requested.emit(target)
        elif action == "example" and target.isdigit() and int(target) < len(self.examples):
            self.example_chosen.emit(self.examples[int(target)])
        elif action in MESSAGE_ACTIONS and target.isdigit():
            self.action_requested.emit(action.replace("message-", ""), int(target))
        elif url.scheme() == "copy":
            try:
                code = self._code[int(url.path())]
            except (ValueError, IndexError):
                return
            QGuiApplication.clipboard().setText(code)
            self.message_copied.emit(code)

    def plain_text(self) -> str:
        return self.toPlainText()

    def contextMenuEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """The standard menu (Copy, Select All), after the actions of the message at the caret (from the keyboard)
        or under the pointer, and the links of that paragraph (a code block's Copy, a source, a thinking block)."""
        keyboard = event.reason() == event.Reason.Keyboard
        cursor = self.textCursor() if keyboard else self.cursorForPosition(event.pos())
        menu = self.createStandardContextMenu(event.pos())
        first = menu.actions()[0] if menu.actions() else None
        for label, href in self.links_at(cursor.position()):
            action = menu.addAction(label, lambda href=href: self._on_anchor(QUrl(href)))
            if first is not None:
                menu.removeAction(action)
                menu.insertAction(first, action)
        if first is not None and self.links_at(cursor.position()):
            menu.insertSeparator(first)
        menu.exec(event.globalPos() if not keyboard else self.viewport().mapToGlobal(self.cursorRect(cursor).center()))

    def links_at(self, position: int) -> list[tuple[str, str]]:
        """(label, href) of what can be done where the caret is: the links of its paragraph, then the actions in
        the header of the message it is in (the nearest header at or above it)."""
        block = self.document().findBlock(position)
        found = _links_of(block)
        header = block
        while header.isValid() and not any(h.partition(":")[0] in MESSAGE_ACTIONS for _, h in _links_of(header)):
            header = header.previous()
        if header.isValid() and header != block:
            found += _links_of(header)
        return found

    def loadResource(self, kind: int, name: QUrl):  # noqa: N802 (Qt's name)
        """The header's icons, from resources/icons (hearth:attachment): drawn by Hearth, not by a font."""
        if name.scheme() == ICON_SCHEME:
            return icon_image(name.path())
        if name.scheme() == MEDIA_SCHEME:
            # Kept while the transcript lives: Qt holds on to the image it is handed (an unreferenced one
            # crashed the window), and a chat shows the same image again without decoding it again.
            digest = name.path()
            if digest not in self._media_images:
                self._media_images[digest] = self._thumbnail(digest)
            return self._media_images[digest]
        return super().loadResource(kind, name)

    def _thumbnail(self, digest: str) -> QImage:
        try:  # never raise out of Qt's loadResource: the store may be closed (the window closing) or busy
            data = self.media_source(digest) if self.media_source else None
        except Exception:  # noqa: BLE001 (sqlite3's errors and any other: a grey square instead)
            data = None
        image = QImage.fromData(data) if data else QImage()
        if image.isNull():  # its bytes are gone (a recovered history): a grey square says an image was there
            image = QImage(MEDIA_THUMB // 2, MEDIA_THUMB // 2, QImage.Format_RGB32)
            image.fill(QColor("#9ca3af"))
            return image
        return image.scaled(MEDIA_THUMB, MEDIA_THUMB, Qt.KeepAspectRatio, Qt.SmoothTransformation)

    @staticmethod
    def monospace() -> QFont:
        font = QFont("monospace")
        font.setStyleHint(QFont.Monospace)
        return font
