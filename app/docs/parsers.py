"""A file's text, in sections that know their page (PDF) or heading (Markdown, DOCX, HTML).

Parsing works on bytes already read, so the indexer hashes and parses the same read of a file (a file that
changes while it is read cannot give a hash of one version and text of another). A file Hearth cannot turn
into text raises DocProblem with one sentence that says why; nothing here writes anything.
"""

from __future__ import annotations

import csv
import io
import logging
import re
import threading
from dataclasses import dataclass
from html.parser import HTMLParser

from app.core.store.bounded_read import MAX_UNPACKED_BYTES, Budget, TooBig
from app.core.errors import HearthError

# Bigger files are refused before they are read: a 2 GB log would take the indexer's memory and hours of
# embedding for text nobody asks about. The same bound holds for what a packed file (DOCX, PDF) unpacks to.
MAX_FILE_BYTES = MAX_UNPACKED_BYTES

PDF = {".pdf"}
DOCX = {".docx"}
HTML = {".html", ".htm", ".xhtml"}
CSV = {".csv", ".tsv"}
MARKDOWN = {".md", ".markdown", ".mdx", ".rst"}
# Formats whose bytes are not text and that Hearth does not read: said in one sentence without sniffing.
KNOWN_BINARY = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".ico", ".tif", ".tiff", ".zip", ".gz", ".xz",
                ".bz2", ".7z", ".tar", ".rar", ".exe", ".dll", ".so", ".dylib", ".o", ".a", ".class", ".jar",
                ".pyc", ".gguf", ".bin", ".safetensors", ".pt", ".mp3", ".mp4", ".wav", ".ogg", ".mov", ".avi",
                ".sqlite", ".sqlite3", ".db", ".doc", ".xls", ".xlsx", ".ppt", ".pptx", ".odt", ".woff", ".woff2",
                ".ttf", ".otf", ".iso", ".dmg", ".deb", ".rpm", ".npy", ".pkl"}


class DocProblem(HearthError):
    """A file that gives no text to index, with the reason as one sentence."""


@dataclass
class Section:
    text: str
    page: int | None = None  # 1-based, PDFs only
    heading: str | None = None


@dataclass
class Parsed:
    kind: str  # pdf | docx | html | csv | markdown | text
    sections: list[Section]
    encoding: str | None = None  # for text formats: how the bytes were decoded


def parse(name: str, data: bytes, cancel: threading.Event | None = None) -> Parsed:
    """The text of a file called name (its suffix picks the format) whose bytes are data.

    What a packed format unpacks to counts against MAX_UNPACKED_BYTES as it is unpacked (DocProblem past it);
    cancel, where given, is looked at while a long file is read (bounded_read.Cancelled once it is set)."""
    suffix = _suffix(name)
    if not data:
        raise DocProblem(f"{name} is empty.")
    if suffix in KNOWN_BINARY:
        raise DocProblem(f"{name} is a {suffix[1:].upper()} file, not a document Hearth reads.")
    budget = Budget(name, MAX_UNPACKED_BYTES, cancel)
    try:
        if suffix in PDF:
            parsed = _pdf(name, data, budget)
        elif suffix in DOCX:
            parsed = _docx(name, data, budget)
        else:
            parsed = None
    except TooBig as exc:
        raise DocProblem(str(exc)) from None
    if parsed is None:
        text, encoding = decode_text(name, data)
        if suffix in HTML:
            parsed = Parsed("html", _html(text), encoding)
        elif suffix in CSV:
            parsed = Parsed("csv", [Section(_csv_file(name, text, "\t" if suffix == ".tsv" else None))], encoding)
        elif suffix in MARKDOWN:
            parsed = Parsed("markdown", _markdown(text), encoding)
        else:
            parsed = Parsed("text", [Section(text)], encoding)
    parsed.sections = [s for s in parsed.sections if s.text.strip()]
    if not parsed.sections:
        raise DocProblem(f"{name} has no text in it.")
    return parsed


def full_text(parsed: Parsed) -> tuple[str, list[int]]:
    """The document as one string (sections joined by a blank line) and where each section starts in it:
    citations' character spans point into this string."""
    starts, parts, at = [], [], 0
    for section in parsed.sections:
        starts.append(at)
        parts.append(section.text)
        at += len(section.text) + 2
    return "\n\n".join(parts), starts


def _suffix(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


# --- text ---------------------------------------------------------------------------------------------------

def decode_text(name: str, data: bytes) -> tuple[str, str]:
    """Text from bytes: UTF-8 (with or without BOM), UTF-16 with its BOM, else Windows-1252 (every Western
    file of the last decades that is not UTF-8). Bytes that look like a program or an image are refused."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16"), "utf-16"
        except UnicodeDecodeError:
            raise DocProblem(f"{name} says it is UTF-16 text but is not.") from None
    head = data[:8192]
    if b"\x00" in head or _control_share(head) > 0.1:
        raise DocProblem(f"{name} is a binary file, not text.")
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:
        return data.decode("latin-1"), "latin-1"


def _control_share(head: bytes) -> float:
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return controls / max(1, len(head))


_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def _markdown(text: str) -> list[Section]:
    """Sections split at ATX headings (# Title), each knowing the heading it sits under. Headings inside a
    fenced code block are code (a shell comment), not headings."""
    sections: list[Section] = []
    heading, lines, fenced = None, [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else _MD_HEADING.match(line)
        if match:
            if any(l.strip() for l in lines):
                sections.append(Section("\n".join(lines).strip("\n"), heading=heading))
            heading, lines = match.group(2), [line]
        else:
            lines.append(line)
    if any(l.strip() for l in lines):
        sections.append(Section("\n".join(lines).strip("\n"), heading=heading))
    return sections


def _csv_file(name: str, text: str, delimiter: str | None) -> str:
    try:
        return _csv(text, delimiter)
    except csv.Error as exc:  # the csv module's own refusals (a NUL, a quote it cannot close): one sentence
        raise DocProblem(f"{name} is not a CSV file Hearth can read ({exc}).") from None


# A cell may be as long as the file: the csv module's default (128 KB a field) refused real files with a long text
# cell, and the file as a whole is bounded already (MAX_FILE_BYTES). Set once: the limit is the process's.
csv.field_size_limit(max(csv.field_size_limit(), MAX_FILE_BYTES + 1))


def _csv(text: str, delimiter: str | None) -> str:
    """One line per row, each value with its column's name ("city: Oslo; population: 709,000"), so a chunk of
    rows read alone still says what its numbers are."""
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    rows = [row for row in csv.reader(io.StringIO(text), delimiter=delimiter) if any(v.strip() for v in row)]
    if len(rows) < 2:
        return "\n".join("; ".join(row) for row in rows)
    header = [h.strip() or f"column {i + 1}" for i, h in enumerate(rows[0])]
    lines = []
    for row in rows[1:]:
        cells = [f"{header[i] if i < len(header) else f'column {i + 1}'}: {v.strip()}"
                 for i, v in enumerate(row) if v.strip()]
        lines.append("; ".join(cells))
    return "\n".join(lines)


class _HTMLText(HTMLParser):
    """Visible text of a page, a line per block, cut into sections at h1-h6."""

    # Paragraph-like blocks are set apart by a blank line, list items and rows by a line break.
    PARAGRAPHS = {"p", "div", "section", "article", "header", "footer", "blockquote", "pre", "table", "ul", "ol"}
    LINES = {"br", "li", "tr", "dd", "dt", "hr"}
    HIDDEN = {"script", "style", "noscript", "template", "head"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.sections: list[Section] = []
        self.heading: str | None = None
        self.parts: list[str] = []
        self.in_heading: list[str] | None = None
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.HIDDEN:
            self.hidden += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self._close_section()
            self.in_heading = []
        elif tag in self.PARAGRAPHS:
            self.parts.append("\n\n")
        elif tag in self.LINES:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif re.fullmatch(r"h[1-6]", tag) and self.in_heading is not None:
            self.heading = " ".join("".join(self.in_heading).split()) or None
            self.parts.append((self.heading or "") + "\n")
            self.in_heading = None
        elif tag in self.PARAGRAPHS:
            self.parts.append("\n\n")

    def handle_data(self, data):
        if self.hidden:
            return
        if self.in_heading is not None:
            self.in_heading.append(data)
        else:
            self.parts.append(data)

    def _close_section(self):
        text = _tidy("".join(self.parts))
        if text:
            self.sections.append(Section(text, heading=self.heading))
        self.parts = []

    def result(self) -> list[Section]:
        self._close_section()
        return self.sections


def _html(text: str) -> list[Section]:
    parser = _HTMLText()
    parser.feed(text)
    parser.close()
    return parser.result()


def _tidy(text: str) -> str:
    """Runs of spaces inside a line become one; three or more line breaks become a blank line."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# --- PDF and DOCX -------------------------------------------------------------------------------------------

def _pdf(name: str, data: bytes, budget: Budget) -> Parsed:
    import pypdf
    from pypdf.errors import LimitReachedError, PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings about odd PDFs are not the user's news
    sections = []
    try:
        with _pdf_limits(budget.limit):
            reader = pypdf.PdfReader(io.BytesIO(data))
            if reader.is_encrypted:
                try:  # many PDFs are "encrypted" with an empty user password: they open for everyone
                    opened = reader.decrypt("")
                except Exception:  # pypdf raises several types here (a missing AES library among them)
                    opened = 0
                if not opened:
                    raise DocProblem(f"{name} is encrypted with a password; Hearth cannot read it.")
            for i, page in enumerate(reader.pages):
                # A page's content streams, unpacked, count against the file's budget before their text is taken:
                # a small PDF can point every page at one stream of zeros that inflates a thousandfold.
                contents = page.get_contents()
                budget.take(len(contents.get_data()) if contents is not None else 0, f"page {i + 1}")
                sections.append(Section(_tidy(page.extract_text() or ""), page=i + 1))
    except DocProblem:
        raise
    except LimitReachedError:
        raise budget.too_big() from None
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError,
            OSError) as exc:
        raise DocProblem(f"{name} is not a PDF Hearth can read ({type(exc).__name__}).") from None
    if not any(s.text for s in sections):
        raise DocProblem(f"{name} has no text layer (a scanned PDF?); Hearth does not do OCR.")
    return Parsed("pdf", sections)


def _pdf_limits(limit: int):
    """pypdf's own limits on one stream's unpacked bytes, set to ours, so no single stream can pass the budget
    before it is counted (pypdf 7 has them as a Configuration; older ones keep their defaults of 75 MB)."""
    import contextlib

    import pypdf

    apply = getattr(pypdf, "apply_configuration", None)
    if apply is None:
        return contextlib.nullcontext()
    wanted = {key: limit for key in ("zlib_maximum_output_length", "lzw_maximum_output_length",
                                     "run_length_maximum_output_length", "array_based_stream_maximum_output_length",
                                     "brotli_maximum_output_length", "jbig2_maximum_output_length",
                                     "image_maximum_buffer_size", "stream_decoding_work_maximum_length")}
    return apply(**{k: v for k, v in wanted.items() if hasattr(pypdf.Configuration, k)})


def _docx(name: str, data: bytes, budget: Budget) -> Parsed:
    import zipfile
    import zlib

    from app.docs.docx_text import NotDocx, blocks, is_heading

    sections: list[Section] = []
    heading, lines = None, []

    def close():
        text = "\n".join(lines).strip()
        if text:
            sections.append(Section(text, heading=heading))

    try:
        # Paragraphs and tables in the order they stand, so a table belongs to the heading above it.
        for block in blocks(data, budget):
            if block.rows:
                lines.append(_csv("\n".join(",".join(_quote(c) for c in row) for row in block.rows), ","))
            elif is_heading(block.style):
                close()
                heading, lines = block.text.strip() or None, [block.text]
            else:
                lines.append(block.text)
    except (NotDocx, zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, NotImplementedError, EOFError,
            OSError) as exc:
        why = str(exc) if isinstance(exc, NotDocx) else type(exc).__name__
        raise DocProblem(f"{name} is not a DOCX file Hearth can read ({why}).") from None
    close()
    return Parsed("docx", sections)


def _quote(cell: str) -> str:
    return '"' + cell.replace('"', '""') + '"'
