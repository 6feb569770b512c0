"""The attachment mark in a message's header is an icon from resources/icons, not the emoji 📎 (#49.19: an
empty box on a system without an emoji font, as offscreen)."""

from __future__ import annotations

from PySide6.QtGui import QTextDocument, QTextFormat
from PySide6.QtCore import QUrl

from app.ui.chat.message_notes import answer_note


def header_images(transcript) -> list[str]:
    names = []
    block = transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.objectType() == QTextFormat.ImageObject:
                names.append(fmt.toImageFormat().name())
            it += 1
        block = block.next()
    return names


def test_a_question_s_files_are_marked_by_the_attachment_icon(qtbot):
    from app.ui.shell.app import make_app
    from app.ui.chat.transcript import Transcript

    make_app([])
    transcript = Transcript()
    qtbot.addWidget(transcript)
    note = answer_note({"attachments": [{"name": "party.txt", "tokens": 1234, "mode": "whole"}]})
    assert note.startswith("📎 party.txt")  # the text keeps the glyph (exports, copies)
    transcript.show_messages([("user", "What is the budget?", note)])
    qtbot.waitUntil(lambda: "party.txt" in transcript.plain_text(), timeout=5_000)
    assert "📎" not in transcript.plain_text()
    assert header_images(transcript) == ["hearth:attachment"]
    image = transcript.loadResource(QTextDocument.ImageResource, QUrl("hearth:attachment"))
    assert not image.isNull() and image.width() == 32
