"""The answer's header never parts a number from its unit (#49.17: "63.1 tok/" on one line, "s" on the next, at
1280 px): laid out by Qt at every width, no line ends inside a figure."""

from __future__ import annotations

import html

from PySide6.QtGui import QTextDocument

from app.ui.chat.message_notes import answer_note

FIGURES = ("2048\u00a0tokens", "63.1\u00a0tok\u2060/\u2060s", "120\u00a0tokens as before")


def line_texts(document: QTextDocument) -> list[str]:
    out = []
    block = document.begin()
    while block.isValid():
        layout = block.layout()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            out.append(block.text()[line.textStart():line.textStart() + line.textLength()])
        block = block.next()
    return out


def test_no_line_of_the_header_ends_inside_a_figure(qtbot):
    from app.ui.shell.app import make_app

    make_app([])
    meta = {"model": "a-rather-long-model-name-Q4_K_M.gguf", "completion_tokens": 2048, "gen_tok_s": 63.07,
            "finish_reason": "length", "prediction": {"accepted": 120}}
    note = answer_note(meta)
    for figure in FIGURES:
        assert figure in note
    document = QTextDocument()
    document.setHtml(f"<b>Assistant</b> <span style='color:#9ca3af'>{html.escape(note)}</span>")
    for width in range(60, 700, 3):
        document.setTextWidth(width)
        lines = line_texts(document)
        for before, after in zip(lines, lines[1:]):
            # Broken inside a figure, a line would end in a digit or "tok/" and the next begin with the unit.
            assert not (before.rstrip().endswith(("tok/", "tok\u2060/", "tok\u2060/\u2060")) or after.startswith(
                ("s ", "s\u00a0", "\u2060s", "tokens", "tok"))), (width, before, after)


def test_an_answer_without_a_measured_speed_shows_none():
    """#55 D6: imported messages without figures showed "0.0 tok/s" in every header."""
    assert "tok" not in answer_note({"completion_tokens": 12}).replace("tokens", "")
    assert "31.5" in answer_note({"completion_tokens": 12, "gen_tok_s": 31.5})
