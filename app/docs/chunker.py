"""Passages of a document, each with its page or heading and its character span in the document's text.

A chunk never crosses a section (so its page and heading are one), ends at the best break within reach (a
blank line, then a line, a sentence, a word) and starts a little before the last one ended: an answer that
sits on a break is whole in one of the two. CHUNK_CHARS keeps a chunk well inside the embedding model's 512
tokens (about 4 characters a token in English; code and other scripts take more tokens per character).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.docs.parsers import Parsed, full_text

CHUNK_CHARS = 1000
OVERLAP_CHARS = 150
_BREAKS = ("\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ")


@dataclass
class Chunk:
    text: str
    start: int  # in full_text(parsed): text == full_text[start:end]
    end: int
    page: int | None = None
    heading: str | None = None


def chunk(parsed: Parsed, size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS) -> list[Chunk]:
    _, starts = full_text(parsed)
    chunks: list[Chunk] = []
    for section, offset in zip(parsed.sections, starts):
        for start, end in spans(section.text, size, overlap):
            chunks.append(Chunk(section.text[start:end], offset + start, offset + end, section.page,
                                section.heading))
    return chunks


def spans(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """(start, end) pairs covering text, none longer than size, neither starting nor ending in whitespace."""
    out: list[tuple[int, int]] = []
    n, start = len(text), 0
    while start < n:
        while start < n and text[start].isspace():
            start += 1
        if start >= n:
            break
        end = min(n, start + size)
        if end < n:
            end = _break_before(text, start, end, size)
        stop = end
        while stop > start and text[stop - 1].isspace():
            stop -= 1
        out.append((start, stop))
        if end >= n:
            break
        # The next chunk starts `overlap` before this one's end, at a word, and always moves forward.
        nxt = max(start + 1, end - overlap)
        space = text.find(" ", nxt, end)
        start = space + 1 if 0 <= space < end - 1 else end
    return out


def _break_before(text: str, start: int, end: int, size: int) -> int:
    """The end of the last good break in text[start:end], searched in its second half only, so a chunk is
    never much shorter than size."""
    floor = start + size // 2
    for mark in _BREAKS:
        at = text.rfind(mark, floor, end)
        if at >= 0:
            return at + len(mark)
    return end
