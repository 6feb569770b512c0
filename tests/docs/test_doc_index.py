"""The documents' index on real SQLite: a folder of every format, incremental re-indexing, bad input, cancel."""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest

from app.core import paths
from app.docs import indexer as indexer_module
from app.docs.indexer import Indexer
from app.docs.parsers import full_text, parse
from app.docs.search import search
from app.docs.store import Store
from tests.docs.conftest import write_pdf


@pytest.fixture
def store():
    s = Store()
    yield s
    s.close()


def names(hits):
    return [h.where() for h in hits]


def test_a_folder_of_every_format_answers_by_file_page_and_heading(store, docs_folder):
    report = Indexer(store).add("home", docs_folder)
    assert (report.added, report.problems, report.cancelled) == (6, [], False)
    assert paths.docs_index().exists()  # in the data folder
    assert names(search(store, "where is the reset button of the boiler?", ["home"]))[0] == "manual.pdf p. 2"
    assert names(search(store, "how much did revenue grow", ["home"]))[0] == "report.docx § Finances"
    assert names(search(store, "tomatoes sun", ["home"]))[0] == "readme.md § Gardening"
    assert names(search(store, "what is the parrot called", ["home"]))[0] == "page.html § Pets"
    assert names(search(store, "population of Bergen", ["home"]))[0] == "cities.csv"
    assert names(search(store, "frobnicate", ["home"]))[0] == "tool.py"
    # FTS5's own syntax in a question is text, not an error.
    assert search(store, 'boiler" AND NEAR( -', ["home"])


def test_a_citation_points_at_its_span_in_the_document(store, docs_folder):
    Indexer(store).add("home", docs_folder)
    hit = search(store, "reset button blue panel", ["home"])[0]
    whole, _ = full_text(parse("manual.pdf", (docs_folder / "manual.pdf").read_bytes()))
    assert whole[hit.start:hit.end] == hit.text and "blue panel" in hit.text


def test_reindex_reads_only_what_changed(store, docs_folder, monkeypatch):
    Indexer(store).add("home", docs_folder)
    reads = []
    real_read = indexer_module.read_whole
    monkeypatch.setattr(indexer_module, "read_whole", lambda p, st: (reads.append(p.name), real_read(p, st))[1])

    (docs_folder / "readme.md").write_text("# Gardening\nCucumbers like warm greenhouses.\n", encoding="utf-8")
    (docs_folder / "cities.csv").unlink()
    (docs_folder / "new.txt").write_text("The spare key is in the garden gnome.", encoding="utf-8")
    os.utime(docs_folder / "tool.py", ns=(1, 1_000_000_000))  # touched: new mtime, same bytes
    report = Indexer(store).update("home")
    assert (report.added, report.changed, report.removed, report.unchanged) == (1, 1, 1, 4)
    assert sorted(reads) == ["new.txt", "readme.md", "tool.py"]  # tool.py is hashed once, not parsed
    assert names(search(store, "cucumbers", ["home"])) == ["readme.md § Gardening"]
    assert search(store, "tomatoes", ["home"]) == []  # the old text left the index with the edit
    assert search(store, "Bergen population", ["home"]) == []
    assert names(search(store, "where is the spare key", ["home"]))[0] == "new.txt"
    reads.clear()
    again = Indexer(store).update("home")
    assert reads == [] and (again.added, again.changed, again.removed) == (0, 0, 0)


def test_bad_input_costs_one_sentence_each_and_the_rest_is_indexed(store, tmp_path, monkeypatch):
    folder = tmp_path / "mixed"
    (folder / "locked").mkdir(parents=True)
    write_pdf(folder / "secret.pdf", ["plans"], password="pw")
    write_pdf(folder / "scan.pdf", ["x"], text=False)
    (folder / "program.dat").write_bytes(bytes(range(256)) * 8)
    (folder / "empty.txt").write_bytes(b"")
    with open(folder / "huge.log", "wb") as f:  # 2 GB, sparse: costs no disk and is never read
        f.truncate(2 * 1024**3)
    (folder / "loop").symlink_to(folder)
    (folder / "dangling").symlink_to(folder / "nowhere")
    (folder / "locked" / "inside.txt").write_text("never seen")
    (folder / "busy.txt").write_text("first version")
    odd = os.fsencode(str(folder)) + b"/caf\xe9.txt"  # a Latin-1 name, not UTF-8
    with open(odd, "wb") as f:
        f.write(b"The menu lists espresso.")
    (folder / "good.md").write_text("# Good\nThe lighthouse keeper feeds the gulls.")

    real_scandir, real_read = os.scandir, indexer_module.read_whole

    def scandir(path):  # the tests run as root, which no chmod stops, so the refusal is the kernel's words
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    def read_while_written(path, st):
        if path.name == "busy.txt":
            with open(path, "a") as f:
                f.write(" and more")  # another program appends while Hearth reads
        return real_read(path, st)

    monkeypatch.setattr(indexer_module.os, "scandir", scandir)
    monkeypatch.setattr(indexer_module, "read_whole", read_while_written)
    report = Indexer(store).add("mixed", folder)
    said = {os.path.basename(path): sentence for path, sentence in report.problems}
    assert "encrypted with a password" in said["secret.pdf"]
    assert "no text layer" in said["scan.pdf"]
    assert "binary" in said["program.dat"]
    assert "is empty" in said["empty.txt"]
    assert "2.1 GB, more than" in said["huge.log"]
    assert "symlink loop" in said["loop"]
    assert "link to nothing" in said["dangling"]
    assert "Permission denied" in said["locked"]
    assert "changed while it was read" in said["busy.txt"]
    assert all(s.endswith(".") and "Traceback" not in s for s in said.values())
    assert len(said) == 9
    assert names(search(store, "lighthouse gulls", ["mixed"])) == ["good.md § Good"]
    assert names(search(store, "espresso", ["mixed"])) == ["caf\\xe9.txt"]
    # The busy file is tried again next time (and now reads whole); the encrypted PDF is not read again.
    monkeypatch.setattr(indexer_module, "read_whole", real_read)
    again = Indexer(store).update("mixed")
    assert "busy.txt" not in {os.path.basename(p) for p, _ in again.problems}
    assert names(search(store, "first version and more", ["mixed"]))[0] == "busy.txt"


def test_cancelling_leaves_each_file_whole(store, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(20):
        (folder / f"f{i:02}.txt").write_text(f"Document {i} talks about subject{i}. " * 60)
    cancel = threading.Event()
    seen = []

    def progress(p):
        seen.append(p.done)
        if p.phase == "text" and p.done == 7:
            cancel.set()

    report = Indexer(store, progress=progress, cancel=cancel).add("many", folder)
    assert report.cancelled and report.added == 8
    db = sqlite3.connect(paths.docs_index())
    per_file = db.execute("SELECT f.path, count(c.id), f.chars FROM files f LEFT JOIN chunks c ON c.file_id = f.id "
                          "GROUP BY f.id").fetchall()
    assert len(per_file) == 8 and all(n >= 2 for _, n, _ in per_file)
    fts = db.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
    assert fts == sum(n for _, n, _ in per_file)  # the full-text index matches the chunks exactly
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # The next run finishes the rest.
    rest = Indexer(store).update("many")
    assert (rest.added, rest.unchanged, rest.cancelled) == (12, 8, False)


def test_removing_a_collection_removes_its_index(store, docs_folder):
    Indexer(store).add("home", docs_folder)
    Indexer(store).add("other", docs_folder / "readme.md")
    before = store.size_bytes()
    assert store.remove_collection("home")
    assert [c.name for c in store.collections()] == ["other"]
    assert search(store, "boiler", ["home", "other"]) == []
    assert names(search(store, "tomatoes", ["other"])) == ["readme.md § Gardening"]
    wal = paths.docs_index().with_name(paths.docs_index().name + "-wal")
    text = paths.docs_index().read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    assert b"boiler" not in text and store.size_bytes() < before


def test_a_run_that_a_kill_ended_is_said_interrupted_and_one_that_ended_is_not(tmp_path):
    """#48 B9: after a restart nothing said that the index was interrupted. A run marks its collection while it
    lasts; a process killed mid-run leaves the mark, which the next start reads; a run that ends (done or
    cancelled) leaves none, and a run still going in another process is not called interrupted."""
    import subprocess
    import sys
    import threading

    from app.docs.indexer import Indexer
    from app.docs.store import Store

    index = tmp_path / "index.sqlite3"
    killed = ("import os, sys\nfrom app.docs.store import Store\ns = Store(sys.argv[1])\n"
              "s.begin_run(s.collection_id('killed', create=True))\nos._exit(9)\n")
    subprocess.run([sys.executable, "-c", killed, str(index)], check=False, timeout=60)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.md").write_text("# One\nFirst file.\n", encoding="utf-8")
    store = Store(index)
    try:
        assert store.interrupted() == ["killed"]
        Indexer(store).add("done", folder)
        cancel = threading.Event()
        cancel.set()
        assert Indexer(store, cancel=cancel).add("cancelled", folder).cancelled
        store.begin_run(store.collection_id("done"))  # a run of this process, still going
        assert store.interrupted() == ["killed"]
        Indexer(store).update("killed")  # indexed again: no longer interrupted
        assert store.interrupted() == []
    finally:
        store.close()
