"""Chat Markdown as the transcript shows it: each line break kept (as LM Studio and ChatGPT show an answer, not
CommonMark's space), LaTeX formulas set out of Markdown's reach, and code split from text. Qt's QTextDocument
reads the Markdown; nothing here knows the transcript."""

from __future__ import annotations

import functools
import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor, QTextDocument, QTextDocumentFragment

from app.ui.chat.math_text import find_math, latex_html

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)(?:^```[ \t]*$|\Z)", re.S | re.M)
LINE_BREAK = "\u2028"  # Qt's line separator: a line break inside a paragraph (or list item)
RULE_LINE = re.compile(r"^[ \t]*([=*_-])(?:[ \t]*\1)*[ \t]*$")  # "===", "---", "* * *"
# A formula's place while Markdown is read (private-use characters: no answer writes them, Markdown leaves them).
MATH_MARK = re.compile("\ue000(\\d+)\ue001")
DISPLAY_SCALE = 1.2  # a displayed formula's size to the text's, as TeX sets $$…$$ apart


def chat_markdown(text: str) -> QTextDocumentFragment:
    """Markdown as chat apps show it: each line break kept.

    Qt's importer makes CommonMark's hard break ("  " at a line's end) a new block, which inside a list is a
    new, numbered item; so each line gets Qt's line separator at its end instead, which Markdown reads as
    text. Where the next line starts a block of its own (a list item, a heading) the separator ends up at
    its block's end, and the soft break's space after it at the next line's start: both are taken out."""
    # LaTeX first, out of Markdown's reach: its _ and * are not emphasis, its | no table.
    formulas: list[tuple[str, bool]] = []
    pieces, pos = [], 0
    for start, end, latex, display in find_math(text):
        pieces.append(text[pos:start])
        mark = f"\ue000{len(formulas)}\ue001"
        pieces.append(f"\n\n{mark}\n\n" if display else mark)  # a displayed formula is a paragraph of its own
        formulas.append((latex, display))
        pos = end
    text = "".join(pieces) + text[pos:]
    lines = text.split("\n")
    for i in range(len(lines) - 1):
        line, following = lines[i], lines[i + 1]
        # Not at a paragraph's end (a blank line), nor in a table (a marked delimiter row makes no table), nor
        # at a heading's underline or a rule ("Title" over "===" is a heading).
        if (line.strip() and following.strip() and "|" not in line and "|" not in following
                and not RULE_LINE.match(line) and not RULE_LINE.match(following)):
            lines[i] = line.rstrip() + LINE_BREAK
    doc = QTextDocument()
    doc.setMarkdown("\n".join(lines))
    cursor = QTextCursor(doc)
    found = doc.find(LINE_BREAK)
    while not found.isNull():
        end = found.selectionEnd()
        block = found.block()
        at_block_end = end >= block.position() + block.length() - 1
        if at_block_end:
            found.removeSelectedText()
        elif doc.characterAt(end) == " ":
            cursor.setPosition(end)
            cursor.setPosition(end + 1, QTextCursor.KeepAnchor)
            cursor.removeSelectedText()
        found = doc.find(LINE_BREAK, found.position() if at_block_end else end)
    if formulas:
        _put_formulas(doc, formulas)
    return QTextDocumentFragment(doc)


def _put_formulas(doc: QTextDocument, formulas: list[tuple[str, bool]]) -> None:
    """Each formula's mark replaced by the formula (app/ui/chat/math_text.py): a displayed one centred, larger."""
    block = doc.begin()
    while block.isValid():
        text = block.text()
        matches = list(MATH_MARK.finditer(text))
        for m in reversed(matches):  # from the end: the earlier marks keep their positions
            latex, display = formulas[int(m.group(1))]
            cursor = QTextCursor(doc)
            cursor.setPosition(block.position() + m.start())
            cursor.setPosition(block.position() + m.end(), QTextCursor.KeepAnchor)
            size = doc.defaultFont().pointSizeF() if doc.defaultFont().pointSizeF() > 0 else 10
            formula = latex_html(latex, display, size * DISPLAY_SCALE if display else None)
            if display:
                if text.strip() == m.group(0):
                    centred = block.blockFormat()
                    centred.setAlignment(Qt.AlignHCenter)
                    cursor.setBlockFormat(centred)
            cursor.insertHtml(formula)
        block = block.next()


@functools.cache
def paragraph_gap() -> float:
    """The space Qt's Markdown puts above a paragraph that follows another."""
    doc = QTextDocument()
    doc.setMarkdown("a\n\nb")
    return doc.lastBlock().blockFormat().topMargin()


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
