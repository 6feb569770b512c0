"""The conversation as one read-only rich-text document.

Finished messages are rendered once as Markdown, with code blocks in a
monospace box and a "Copy" link. The answer in progress arrives token by
token: tokens are buffered and appended as plain text at most every
FLUSH_MS, and only when the answer ends is that one message re-rendered as
Markdown. Nothing ever re-renders the whole transcript, so a long
conversation costs nothing per token.
"""

from __future__ import annotations

import html
import re

from PySide6.QtCore import QTimer, QUrl, Signal
from PySide6.QtGui import (QFont, QGuiApplication, QTextBlockFormat, QTextCharFormat, QTextCursor,
                           QTextDocumentFragment)
from PySide6.QtWidgets import QTextBrowser

FLUSH_MS = 40
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)(?:^```[ \t]*$|\Z)", re.S | re.M)
ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System", "error": "Error"}


def split_code(text: str) -> list[tuple[str, str, str]]:
    """[(kind, lang, body)] with kind 'text' or 'code'; an unclosed fence runs to the end."""
    parts: list[tuple[str, str, str]] = []
    pos = 0
    for m in FENCE.finditer(text):
        if m.start() > pos:
            parts.append(("text", "", text[pos:m.start()]))
        parts.append(("code", m.group(1).strip(), m.group(2).rstrip("\n")))
        pos = m.end()
    if pos < len(text):
        parts.append(("text", "", text[pos:]))
    return parts


class Transcript(QTextBrowser):
    message_copied = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.anchorClicked.connect(self._on_anchor)
        self.setUndoRedoEnabled(False)
        self.document().setDocumentMargin(12)
        self._code: list[str] = []
        self._pending: list[str] = []
        self._stream_start: int | None = None
        self._stream_text: list[str] = []
        self._flush_timer = QTimer(self)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.setInterval(FLUSH_MS)
        self._flush_timer.timeout.connect(self.flush)
        self._plain = QTextCharFormat()
        self.flushes = 0  # counted for tests and the benchmark: appends that touched the document

    # --- whole messages -------------------------------------------------
    def clear_all(self) -> None:
        self._flush_timer.stop()
        self._pending.clear()
        self._stream_text.clear()
        self._stream_start = None
        self._code.clear()
        self.clear()

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.End)
        return cursor

    def _header(self, cursor: QTextCursor, role: str, note: str = "") -> None:
        color = {"user": "#3b82f6", "assistant": "#10b981", "error": "#ef4444"}.get(role, "#9ca3af")
        if not self.document().isEmpty():
            cursor.insertBlock()
            cursor.insertBlock()
        extra = f" <span style='color:#9ca3af; font-weight:normal'>{html.escape(note)}</span>" if note else ""
        cursor.insertHtml(f"<b style='color:{color}'>{ROLE_NAMES.get(role, role)}</b>{extra}")
        # A fresh block with plain formats: the body must not inherit the header's bold colour.
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())

    def _render_body(self, cursor: QTextCursor, text: str) -> None:
        for kind, lang, body in split_code(text):
            if kind == "code":
                index = len(self._code)
                self._code.append(body)
                label = html.escape(lang) + " · " if lang else ""
                cursor.insertHtml(
                    f"<table width='100%' cellpadding='8' cellspacing='0' bgcolor='{self._code_bg()}'>"
                    f"<tr><td bgcolor='{self._code_bg()}'>"
                    f"<div align='right'><span style='color:#9ca3af'>{label}</span>"
                    f"<a href='copy:{index}'>Copy</a></div>"
                    f"<pre style='font-family:monospace'>{html.escape(body)}</pre></td></tr></table>")
                cursor.movePosition(QTextCursor.End)
            elif body.strip():
                cursor.insertFragment(QTextDocumentFragment.fromMarkdown(body.strip("\n")))

    def _code_bg(self) -> str:
        return "#1f2430" if self.palette().base().color().lightness() < 128 else "#f3f4f6"

    def append_message(self, role: str, text: str, note: str = "") -> None:
        cursor = self._end_cursor()
        self._header(cursor, role, note)
        if role == "error":
            cursor.insertHtml(f"<span style='color:#ef4444'>{html.escape(text)}</span>")
        else:
            self._render_body(cursor, text)
        self._scroll_to_end()

    # --- the answer in progress -----------------------------------------
    def begin_stream(self) -> None:
        cursor = self._end_cursor()
        self._header(cursor, "assistant")
        self._stream_start = cursor.position()
        self._stream_text = []

    @property
    def streaming(self) -> bool:
        return self._stream_start is not None

    def append_token(self, text: str) -> None:
        self._pending.append(text)
        self._stream_text.append(text)
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def flush(self) -> None:
        if not self._pending:
            return
        chunk = "".join(self._pending)
        self._pending.clear()
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        self._end_cursor().insertText(chunk, self._plain)
        self.flushes += 1
        if at_bottom:
            bar.setValue(bar.maximum())

    def stream_text(self) -> str:
        return "".join(self._stream_text)

    def end_stream(self, note: str = "") -> str:
        """Render the finished answer as Markdown in place; returns its text."""
        self._flush_timer.stop()
        self._pending.clear()
        text = self.stream_text()
        if self._stream_start is None:
            return text
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._stream_start)
        cursor.movePosition(QTextCursor.End, QTextCursor.KeepAnchor)
        cursor.removeSelectedText()
        self._render_body(cursor, text)
        if note:
            cursor.insertBlock()
            cursor.insertHtml(f"<span style='color:#9ca3af'>{html.escape(note)}</span>")
        self._stream_start = None
        self._stream_text = []
        self._scroll_to_end()
        return text

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == "copy":
            try:
                code = self._code[int(url.path())]
            except (ValueError, IndexError):
                return
            QGuiApplication.clipboard().setText(code)
            self.message_copied.emit(code)

    def plain_text(self) -> str:
        return self.toPlainText()

    @staticmethod
    def monospace() -> QFont:
        font = QFont("monospace")
        font.setStyleHint(QFont.Monospace)
        return font
