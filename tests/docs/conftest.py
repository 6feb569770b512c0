"""Documents the tests write with real libraries: a PDF with a text layer (fpdf2), an encrypted one, one with
no text (a drawing, as a scan would be), and a DOCX (python-docx)."""

from __future__ import annotations

from pathlib import Path

import pytest


def write_pdf(path: Path, pages: list[str], password: str | None = None, text: bool = True) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for body in pages:
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 8, body)
        else:  # shapes only: what a scanned page looks like to a text extractor
            pdf.rect(20, 20, 100, 60, style="F")
    if password:
        pdf.set_encryption(owner_password="owner", user_password=password)
    pdf.output(str(path))
    return path


def write_docx(path: Path, blocks: list[tuple[str, str]], table: list[list[str]] | None = None) -> Path:
    """blocks: ("h1", text) headings and ("p", text) paragraphs."""
    import docx

    document = docx.Document()
    for kind, text in blocks:
        if kind.startswith("h"):
            document.add_heading(text, level=int(kind[1:]))
        else:
            document.add_paragraph(text)
    if table:
        t = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                t.cell(r, c).text = value
    document.save(str(path))
    return path


@pytest.fixture
def docs_folder(tmp_path) -> Path:
    """A small folder of every format, each with one fact a question can find."""
    folder = tmp_path / "notes"
    folder.mkdir()
    write_pdf(folder / "manual.pdf", ["Chapter one is about the kitchen.",
                                      "The boiler's reset button is under the blue panel."])
    write_docx(folder / "report.docx", [("h1", "Finances"), ("p", "Revenue grew by 12 percent in spring.")])
    (folder / "readme.md").write_text("# Setup\nInstall with pip.\n\n# Gardening\nTomatoes need six hours of sun.\n",
                                      encoding="utf-8")
    (folder / "page.html").write_text("<html><head><style>p{}</style><script>var x=1;</script></head><body>"
                                      "<h2>Pets</h2><p>The parrot is called Kiwi.</p></body></html>", encoding="utf-8")
    (folder / "cities.csv").write_text("city,population\nOslo,709000\nBergen,286000\n", encoding="utf-8")
    (folder / "tool.py").write_text("def frobnicate(x):\n    return x * 42  # the answer\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def embed_gguf(tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2 as a GGUF, made once per session by Hearth's convert from the packaged checkpoint
    (a few seconds), as a user's machine with the convert extra makes it."""
    from app.docs import embed_model

    reason = embed_model.why_not_makeable()
    if reason:
        pytest.skip(f"the embedding GGUF cannot be made here: {reason}")
    return embed_model.make(tmp_path_factory.mktemp("embed") / embed_model.FILE_NAME)


@pytest.fixture(scope="session")
def embedder(embed_gguf):
    """The embedding model in its engine process, loaded once for the session's vector tests."""
    from app.docs.vectors import Embedder

    with Embedder(embed_gguf) as e:
        yield e
