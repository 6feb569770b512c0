"""A DOCX file's paragraphs and tables, in order, read as a stream within a Budget (app/core/store/bounded_read.py).

Not python-docx: it unpacks every part and builds the whole XML tree before the first paragraph, looks up each
paragraph's style anew (20,000 paragraphs took 20 s), and cannot be stopped half-way. Here the main part is
parsed as it is unpacked, each block is let go once its text is taken, the unpacked bytes are counted as they
come out of the decompressor (a zip header's sizes can lie) and the cancel flag is looked at every chunk. The
text is what python-docx gives: the runs of each paragraph (links and tracked insertions included), a table's
cells row by row, headings from the paragraph's style.
"""

from __future__ import annotations

import posixpath
import zipfile
from dataclasses import dataclass, field

from app.core.store.bounded_read import MAX_HELD_BYTES, Budget, open_member, open_zip, read_member

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
P, TBL, TR, TC, R, T = (f"{W}{n}" for n in ("p", "tbl", "tr", "tc", "r", "t"))
# Containers whose runs a reader sees as part of the paragraph's text.
_RUN_HOLDERS = {f"{W}{n}" for n in ("hyperlink", "ins", "smartTag", "fldSimple")}
_RUN_TEXT = {T: None, f"{W}tab": "\t", f"{W}ptab": "\t", f"{W}br": "\n", f"{W}cr": "\n",
             f"{W}noBreakHyphen": "-"}


class NotDocx(Exception):
    """Not a DOCX package (no main document part, or XML that does not parse); the message says what."""


@dataclass
class Block:
    """A paragraph (style: its style's name) or a table (rows of cell texts)."""

    text: str = ""
    style: str = ""
    rows: list[list[str]] = field(default_factory=list)


def blocks(data: bytes, budget: Budget):
    """The document's blocks in order. Raises TooBig or Cancelled (bounded_read), NotDocx, zipfile.BadZipFile."""
    from lxml import etree

    archive = open_zip(data, budget)
    main = _main_part(archive, budget)
    styles = _style_names(archive, main, budget)
    try:
        # What the tree holds at once is counted too: one paragraph of 2.5M runs in a 140 KB file took 1 GB.
        stream = open_member(archive, main, budget, held_limit=MAX_HELD_BYTES)
    except KeyError:
        raise NotDocx(f"it has no {main}") from None
    # No DTDs, no entities, no network: a document part never needs them, and a hostile one would use them.
    events = etree.iterparse(stream, events=("start", "end"), tag=(P, TBL), resolve_entities=False,
                             load_dtd=False, no_network=True, huge_tree=False)
    nested = 0  # how deep inside a table or a paragraph (a text box) the parser is
    try:
        for event, element in events:
            if event == "start":
                nested += 1
                continue
            nested -= 1
            if nested:
                continue
            if element.tag == P:
                yield Block(paragraph_text(element), styles.get(_style_id(element), _style_id(element)))
            else:
                yield Block(rows=[[_cell_text(tc) for tc in tr.iterchildren(TC)] for tr in element.iterchildren(TR)])
            # Let the block go: the tree never holds more than the one in hand.
            element.clear()
            while element.getprevious() is not None:
                del element.getparent()[0]
            stream.release()
    except etree.XMLSyntaxError as exc:
        raise NotDocx(f"its {main} is not well-formed XML ({exc.msg})") from None


def paragraph_text(p) -> str:
    parts = []
    for child in p:
        if child.tag == R:
            _run_text(child, parts)
        elif child.tag in _RUN_HOLDERS:
            for run in child.iter(R):
                _run_text(run, parts)
    return "".join(parts)


def _run_text(run, parts: list[str]) -> None:
    for item in run:
        if item.tag in _RUN_TEXT:
            parts.append(item.text or "" if item.tag == T else _RUN_TEXT[item.tag])


def _cell_text(tc) -> str:
    return "\n".join(paragraph_text(p) for p in tc.iterchildren(P)).strip()


def _style_id(p) -> str:
    ppr = p.find(f"{W}pPr")
    style = ppr.find(f"{W}pStyle") if ppr is not None else None
    return style.get(f"{W}val", "") if style is not None else ""


def is_heading(style: str) -> bool:
    """Word's built-in heading styles are named "heading 1".."heading 9" and "Title" (shown as "Heading 1")."""
    lowered = style.lower()
    return lowered.startswith("heading") or lowered == "title"


# --- the package around the text ----------------------------------------------------------------------------

def _relationships(archive: zipfile.ZipFile, rels: str, budget: Budget) -> dict[str, str]:
    """Relationship type (its last word: officeDocument, styles) -> target, of one .rels part."""
    from lxml import etree

    try:
        raw = read_member(archive, rels, budget, MAX_HELD_BYTES)
    except KeyError:
        return {}
    try:
        root = etree.fromstring(raw, etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True))
    except etree.XMLSyntaxError:
        return {}
    return {rel.get("Type", "").rsplit("/", 1)[-1]: rel.get("Target", "") for rel in root.iter(f"{RELS}Relationship")}


def _main_part(archive: zipfile.ZipFile, budget: Budget) -> str:
    target = _relationships(archive, "_rels/.rels", budget).get("officeDocument")
    if not target:
        if "word/document.xml" in archive.NameToInfo:
            return "word/document.xml"
        raise NotDocx("it has no main document part")
    return target.lstrip("/")


def _style_names(archive: zipfile.ZipFile, main: str, budget: Budget) -> dict[str, str]:
    """Paragraph style id -> its name, from the styles part the main part names."""
    from lxml import etree

    folder, base = posixpath.split(main)
    target = _relationships(archive, posixpath.join(folder, "_rels", base + ".rels"), budget).get("styles")
    if not target:
        return {}
    part = posixpath.normpath(posixpath.join(folder, target)) if not target.startswith("/") else target[1:]
    try:
        raw = read_member(archive, part, budget, MAX_HELD_BYTES)
        root = etree.fromstring(raw, etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True))
    except (KeyError, etree.XMLSyntaxError):
        return {}
    names = {}
    for style in root.iter(f"{W}style"):
        name = style.find(f"{W}name")
        if name is not None:
            names[style.get(f"{W}styleId", "")] = name.get(f"{W}val", "")
    return names
