"""Each format's text, from small files written by real libraries, and the chunker's spans and labels."""

from __future__ import annotations

import pytest

from app.docs.chunker import chunk
from app.docs.parsers import DocProblem, full_text, parse
from tests.docs.conftest import write_docx, write_pdf


def test_pdf_pages_keep_their_numbers(tmp_path):
    path = write_pdf(tmp_path / "m.pdf", ["First page text.", "The reset button is under the blue panel."])
    parsed = parse("m.pdf", path.read_bytes())
    assert parsed.kind == "pdf"
    assert [s.page for s in parsed.sections] == [1, 2]
    assert "reset button is under the blue panel" in parsed.sections[1].text


def test_docx_text_tables_and_headings(tmp_path):
    path = write_docx(tmp_path / "r.docx", [("h1", "Finances"), ("p", "Revenue grew by 12 percent."),
                                            ("h2", "Staff"), ("p", "We hired three people.")],
                      table=[["name", "role"], ["Ada", "engineer"]])
    parsed = parse("r.docx", path.read_bytes())
    by_heading = {s.heading: s.text for s in parsed.sections}
    assert "Revenue grew by 12 percent." in by_heading["Finances"]
    assert "We hired three people." in by_heading["Staff"]
    assert any("name: Ada; role: engineer" in s.text for s in parsed.sections)


def test_html_visible_text_under_its_heading():
    html = ("<html><head><title>t</title><style>.a{color:red}</style></head><body><h1>Pets</h1>"
            "<p>The parrot&nbsp;is called <b>Kiwi</b>.</p><script>alert('no')</script><h2>Plants</h2>"
            "<ul><li>Fern</li><li>Moss</li></ul></body></html>")
    parsed = parse("p.html", html.encode())
    by_heading = {s.heading: s.text for s in parsed.sections}
    assert "The parrot\xa0is called Kiwi." in by_heading["Pets"] or "The parrot is called Kiwi." in by_heading["Pets"]
    assert "Fern\nMoss" in by_heading["Plants"]
    assert not any("alert" in s.text or "color" in s.text for s in parsed.sections)


def test_csv_rows_keep_their_header():
    parsed = parse("c.csv", b"city;population\nOslo;709000\n\nBergen;286000\n")
    assert parsed.sections[0].text.splitlines() == ["city: Oslo; population: 709000",
                                                    "city: Bergen; population: 286000"]


def test_markdown_sections_and_code_fences():
    text = "# Setup\nInstall it.\n```sh\n# not a heading\n```\n## Use\nRun it.\n"
    parsed = parse("r.md", text.encode())
    assert [s.heading for s in parsed.sections] == ["Setup", "Use"]
    assert "# not a heading" in parsed.sections[0].text


def test_odd_encodings_are_read():
    assert parse("a.txt", "Smørbrød på fredag".encode("cp1252")).sections[0].text == "Smørbrød på fredag"
    assert parse("b.txt", "Ωmega".encode("utf-16")).sections[0].text == "Ωmega"
    assert parse("c.py", "\ufeffprint('hi')\n".encode("utf-8")).sections[0].text.startswith("print")


@pytest.mark.parametrize("name, data, says", [
    ("empty.txt", b"", "is empty"),
    ("blank.md", b"\n \n\t\n", "has no text"),
    ("a.out", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4, "binary file"),
    ("photo.png", b"\x89PNG\r\n\x1a\n", "PNG file"),
    ("broken.pdf", b"%PDF-1.4 this is not really a pdf", "not a PDF"),
    ("broken.docx", b"PK\x03\x04 not a zip at all", "not a DOCX"),
])
def test_bad_input_is_one_sentence(name, data, says):
    with pytest.raises(DocProblem) as err:
        parse(name, data)
    message = str(err.value)
    assert says in message and name in message and message.count(". ") == 0 and message.endswith(".")


def test_encrypted_and_textless_pdfs_say_so(tmp_path):
    locked = write_pdf(tmp_path / "locked.pdf", ["secret plans"], password="hunter2")
    with pytest.raises(DocProblem, match="encrypted with a password"):
        parse("locked.pdf", locked.read_bytes())
    scan = write_pdf(tmp_path / "scan.pdf", ["x"], text=False)
    with pytest.raises(DocProblem, match="no text layer"):
        parse("scan.pdf", scan.read_bytes())


def test_an_empty_password_pdf_opens(tmp_path):
    # "Encrypted" with an empty user password (owner restrictions only): every reader opens it, so does Hearth.
    path = write_pdf(tmp_path / "open.pdf", ["The meeting is on Tuesday."], password="")
    assert "Tuesday" in parse("open.pdf", path.read_bytes()).sections[0].text


def test_chunks_cover_the_text_with_exact_spans_and_labels():
    body = " ".join(f"Sentence number {i} says something about topic {i % 7}." for i in range(200))
    text = f"# Intro\nShort intro.\n\n# Long part\n{body}\n"
    parsed = parse("long.md", text.encode())
    whole, _ = full_text(parsed)
    chunks = chunk(parsed, size=400, overlap=60)
    assert len(chunks) > 10
    for c in chunks:
        assert whole[c.start:c.end] == c.text and len(c.text) <= 400 and c.text == c.text.strip()
    assert chunks[0].heading == "Intro" and all(c.heading == "Long part" for c in chunks[1:])
    # Every sentence of the long part sits whole in some chunk (breaks at sentence ends, overlap between chunks).
    for i in range(200):
        sentence = f"Sentence number {i} says something about topic {i % 7}."
        assert any(sentence in c.text for c in chunks), sentence


def test_a_csv_cell_longer_than_128_kb_is_read():
    """A cell of 200 KB (a long text in a spreadsheet export) was `hearth: internal error (Error: field larger than
    field limit (131072))` in `docs add`: the csv module's own default, under the file's bound of its size."""
    parsed = parse("notes.csv", b"title,body\n" + b"x" * 200_000 + b",short\n")
    assert parsed.sections[0].text == "title: " + "x" * 200_000 + "; body: short"
