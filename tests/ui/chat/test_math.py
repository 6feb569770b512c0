"""#31, maths: LaTeX in an answer is drawn as formulas in the transcript (a finished answer and one streaming),
while the store, Copy and export keep the LaTeX."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextTable

ANSWER = (r"The roots of $ax^2 + bx + c = 0$ are" "\n\n"
          r"$$x = \frac{-b \pm \sqrt{b^2 - 4ac}}{2a}$$" "\n\n"
          r"for $a \ne 0$; a *price* of $5 and $10 stays text, as does `$code$`.")


def shown(qtbot, streamed: bool) -> "Transcript":  # noqa: F821
    from app.ui.shell.app import make_app
    from app.ui.chat.transcript import Transcript

    make_app([])
    t = Transcript()
    qtbot.addWidget(t)
    if streamed:
        t.begin_stream()
        for i in range(0, len(ANSWER), 7):
            t.append_token(ANSWER[i:i + 7])
            t.flush()
            if i > ANSWER.index("for $a"):  # the formula's paragraph is complete: drawn while the rest streams
                assert "\\frac" not in t.plain_text() and "√" in t.plain_text()
        assert t.end_stream() == ANSWER
    else:
        t.append_message("assistant", ANSWER)
    return t


def test_latex_in_an_answer_is_drawn_as_formulas_streamed_or_not(qtbot):
    for streamed in (False, True):
        t = shown(qtbot, streamed)
        text = t.plain_text().replace("\xa0", " ").replace("\u2009", "")
        assert "a\xa0≠\xa00" in t.document().toRawText()  # an inline formula is not broken across lines
        assert "ax2 + bx + c = 0" in text and "a ≠ 0" in text and "$" not in text.split("price")[0]
        assert "\\frac" not in text and "\\sqrt" not in text and "−b ± √b2 − 4ac" in text
        assert "of $5 and $10 stays text" in text and "$code$" in text and "*" not in text
        # The displayed formula stands centred, its fraction stacked over a rule (a two-row table).
        doc = t.document()
        tables = [f for f in doc.rootFrame().childFrames() if isinstance(f, QTextTable)]
        assert tables and tables[0].format().alignment() & Qt.AlignHCenter
        fraction = [f for f in tables[0].childFrames() if isinstance(f, QTextTable) and f.rows() == 2]
        assert fraction and "2a" in "".join(fraction[0].cellAt(1, 0).firstCursorPosition().block().text())
