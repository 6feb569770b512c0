"""#55 F: a code block still being written showed its ``` raw (and its code in the body font) until it closed. It
streams as the code block it will be: no fence line, the code in the code font; and the finished answer is the same
Markdown as before."""

from __future__ import annotations

ANSWER = "Here is the script:\n\n```python\nfor i in range(3):\n    print(i)\n```\n\nRun it with python."


def test_an_open_code_fence_streams_as_code_without_its_fence_line(qtbot):
    from app.ui.chat.transcript import Transcript
    from app.ui.shell.app import make_app

    make_app([])
    t = Transcript()
    qtbot.addWidget(t)
    t.begin_stream()
    inside = ANSWER.index("print(i)") + len("print(i)")
    for i in range(0, inside, 5):
        t.append_token(ANSWER[i:min(i + 5, inside)])
        t.flush()
    shown = t.plain_text()
    assert "```" not in shown and "for i in range(3):" in shown and "Here is the script:" in shown
    at = shown.index("range(3)")
    cursor = t.textCursor()
    cursor.setPosition(at + 1)
    assert cursor.charFormat().font().fixedPitch() or "mono" in cursor.charFormat().font().family().lower()
    for i in range(inside, len(ANSWER), 5):
        t.append_token(ANSWER[i:i + 5])
        t.flush()
    assert t.end_stream() == ANSWER
    assert "```" not in t.plain_text() and "Run it with python." in t.plain_text()
