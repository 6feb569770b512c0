"""Indexing documents in the window (#48 B9): Cancel is honoured inside the file in hand, the counter names the
file being read and counts the files done, the Documents page and the chat's Documents box agree on what exists
while a run goes on, and a run a kill ended is said at the next start."""

from __future__ import annotations

import subprocess
import sys
import time

from app.core.store.bounded_read import Cancelled

CANCEL_MS = 5_000  # a file in hand stops within its next look at the flag: well under this
WAIT_MS = 30_000


def folder_with_a_long_file(tmp_path, monkeypatch):
    """a.md, b.md, c-long.docx, d.md; reading c-long.docx lasts until the run's cancel flag is set (as the real
    parsers do with a 340 MB DOCX, looking at the flag as they unpack: tests/docs/test_doc_bounds.py)."""
    from app.docs import indexer

    folder = tmp_path / "papers"
    folder.mkdir()
    for name in ("a.md", "b.md", "d.md"):
        (folder / name).write_text(f"# {name}\nSome text of {name}.\n", encoding="utf-8")
    (folder / "c-long.docx").write_bytes(b"PK not really a docx")
    real = indexer.parse

    def parse(name, data, cancel=None):
        if name.endswith("c-long.docx"):
            give_up = time.monotonic() + 60
            while not cancel.is_set() and time.monotonic() < give_up:
                time.sleep(0.01)
            raise Cancelled()
        return real(name, data, cancel)

    monkeypatch.setattr(indexer, "parse", parse)
    return folder


def box_names(w) -> list[str]:
    panel = w.chat.collections_panel
    return [panel.list.item(i).text() for i in range(panel.list.count())]


def test_cancel_inside_a_file_the_counter_and_both_lists(qtbot, idle_window, tmp_path, monkeypatch):
    w = idle_window
    folder = folder_with_a_long_file(tmp_path, monkeypatch)
    page = w.documents
    w.tabs.setCurrentWidget(page)
    page.vectors.setChecked(False)
    assert page.add_folder(str(folder), "papers")
    # The counter names the file in hand and the files done before it (it sat at "0 of 97 files").
    qtbot.waitUntil(lambda: "reading c-long.docx · 2 of 4 files done" in page.status.text(), timeout=WAIT_MS)
    # While it runs, the collection it made is in the page's table and in the chat's Documents box alike.
    assert page.table.rowCount() == 1 and page.table.item(0, 0).text() == "papers"
    assert box_names(w) == ["papers"]
    # The table counts what the progress line counts (#55 D7: "20 files, 240 chunks" beside "1,325 of 3,000").
    assert page.table.item(0, 1).text() == "2 of 4"
    started = time.monotonic()
    with qtbot.waitSignal(page.runner.finished, timeout=CANCEL_MS) as ended:
        page.cancel_button.click()
        assert "Cancelling papers" in page.status.text() and not page.cancel_button.isEnabled()
    assert time.monotonic() - started < CANCEL_MS / 1000
    report = ended.args[0]
    assert report.cancelled and report.added == 2
    assert page.status.text().startswith("Cancelled; the index keeps what was done: papers: 2 added")
    assert page.table.item(0, 1).text() == "2" and box_names(w) == ["papers"]
    assert not page.runner.running and page.add_button.isEnabled()


def test_a_run_a_kill_ended_is_said_at_the_next_start_until_indexed_again(qtbot, idle_window, tmp_path):
    from app.docs.store import Store

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "one.md").write_text("# One\nA note.\n", encoding="utf-8")
    # A `hearth docs add` (or a window) killed in the middle of its run: its mark stays in the index.
    killed = ("import os, sys\nfrom app.docs.store import Store\ns = Store()\ncid = s.collection_id('notes', "
              "create=True)\ns.add_root(cid, sys.argv[1])\ns.begin_run(cid)\nos._exit(9)\n")
    subprocess.run([sys.executable, "-c", killed, str(folder)], check=False, timeout=60)
    assert Store().interrupted() == ["notes"]
    w = idle_window
    page = w.documents  # built as at a start: it reads the index
    qtbot.waitUntil(lambda: "interrupted" in w.statusBar().currentMessage(), timeout=WAIT_MS)
    assert "Indexing notes was interrupted when Hearth last stopped" in w.statusBar().currentMessage()
    assert page.table.item(0, 0).text() == "notes (interrupted)"
    page.table.selectRow(0)
    assert page.selected() == "notes"
    page.vectors.setChecked(False)
    with qtbot.waitSignal(page.runner.finished, timeout=WAIT_MS) as ended:
        page.update_button.click()
    assert ended.args[0].added == 1 and not ended.args[0].cancelled
    assert page.table.item(0, 0).text() == "notes"
    assert w.notices.board.of("documents.interrupted") is None
