"""The Documents page: collections (LocalDocs), adding a folder, indexing progress, re-indexing and removing.

Which collections a chat answers from is chosen on the chat page (its Documents box); this page makes them. Both
read the same index, and this page says `collections_changed` whenever a collection may have come or gone (a run
that made it started, a run ended in any way, a removal), so the two never disagree on what exists (#48 B9). A
run that a crash or a kill ended is marked "interrupted" in the table and said once on the status bar.
"""

from __future__ import annotations

import os
from contextlib import closing

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (QCheckBox, QFileDialog, QHeaderView, QInputDialog, QLabel, QMessageBox, QProgressBar,
                               QTableWidgetItem, QWidget)

from app.ui.widgets.notices import ERROR, UNTIL_CLEARED, WARNING, Notice, cleared
from app.ui.docs.index_runner import IndexRunner
from app.ui.widgets import STRETCH, button, chosen_row_text, hbox, picking_table, vbox, wrapped


def progress_text(p) -> str:
    """The file in hand, files done, chunks, time left: "reading report.docx · 12 of 40 files done · 310 chunks ·
    about 8 s left"."""
    what = "files done" if p.phase == "text" else "chunks embedded"
    left = f" · about {p.eta_s:.0f} s left" if p.eta_s is not None else ""
    reading = f"reading {os.path.basename(p.current)} · " if p.current else ""
    return f"{reading}{p.done:,} of {p.total:,} {what} · {p.chunks:,} chunks{left}"


def report_text(r) -> str:
    head = "Cancelled; the index keeps what was done" if r.cancelled else "Indexed"
    text = (f"{head}: {r.collection}: {r.added} added, {r.changed} changed, {r.removed} removed, {r.unchanged} "
            f"unchanged; {r.chunks:,} chunks, {r.embedded:,} embedded, in {r.seconds:.1f} s.")
    if r.vectors_note:  # the window's words: no command (the CLI's note says how to install the model)
        from app.docs.embed_model import NO_VECTORS_PLAIN

        text += f" {NO_VECTORS_PLAIN}"
    if r.problems:
        text += f" {len(r.problems)} without text (their reasons are in the list's tooltip)."
    return text


def folder_summary(folder: str, budget_s: float = 0.5, most: int = 10_000) -> str:
    """"Index /home/me/papers: 5 files (12.3 MB)", counted as the indexer walks, within a short budget."""
    import time
    from pathlib import Path

    from app.core.units import human_size
    from app.docs.indexer import walk

    files = size = 0
    more = False
    until = time.monotonic() + budget_s
    for _path, st in walk(Path(folder), []):
        files, size = files + 1, size + st.st_size
        if files >= most or time.monotonic() > until:
            more = True
            break
    count = f"{'more than ' if more else ''}{files:,} file{'s' if files != 1 else ''}"
    return f"Index {folder}: {count} ({human_size(size)}{' so far' if more else ''})"


def interrupted_text(names: list[str]) -> str:
    listed = ", ".join(names)
    return (f"Indexing {listed} was interrupted when Hearth last stopped; Re-index on the Documents page goes on "
            "from where it stopped (the files indexed before are kept).")


class DocumentsPage(QWidget):
    collections_changed = Signal()
    noticed = Signal(object)  # a Notice (app.ui.widgets.notices) for the window's status bar

    def __init__(self, bridge=None, parent=None):
        """bridge: the window's EngineBridge: indexing yields to its answers (held while the chat model answers,
        resumed when it is done), which the page follows itself."""
        super().__init__(parent)
        self.runner = IndexRunner(self)
        if bridge is not None:
            bridge.generation_started.connect(lambda _waiting: self.runner.hold())
            for signal in (bridge.generation_finished, bridge.generation_failed, bridge.engine_crashed):
                signal.connect(self.runner.resume)
        self.interrupted: list[str] = []  # collections whose last run a crash or a kill ended
        self._interrupted_said = False
        self._run_listed = False  # the running collection has been shown in the table (and the chat's box)
        self.table = picking_table(["Collection", "Files", "Chunks", "With vectors", "Folders"], "Collections")
        self.table.horizontalHeader().setSectionResizeMode(4, QHeaderView.Stretch)
        self.add_button = button("Add folder…", self._on_add_clicked,
                                 "Index a folder into a collection (new or existing); only what changed is read "
                                 "again later")
        self.update_button = button("Re-index", self._on_update_clicked,
                                    "Read the collection's folders again: changed, added and removed files")
        self.remove_button = button("Remove", self._on_remove_clicked,
                                    "Remove the collection and its index (the files themselves stay)")
        self.cancel_button = button("Cancel", self.cancel)
        self.vectors = QCheckBox("Vectors (all-MiniLM-L6-v2)")
        self.vectors.setToolTip("Embed each passage for search by meaning, fused with keyword search (BM25); "
                                "off: BM25 only, much faster to index")
        # Ticked only where vectors can be made: a box ticked by default that makes none promised what it could not
        # keep (#55 E2); where it cannot, it says why in plain words.
        from app.docs import embed_model

        if embed_model.available():
            self.vectors.setChecked(True)
        else:
            self.vectors.setChecked(False)
            self.vectors.setEnabled(False)
            self.vectors.setToolTip(embed_model.NO_VECTORS_PLAIN)
        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.status = wrapped()
        self.index_size = QLabel("")
        self.index_size.setObjectName("hint")
        # A narrow window wraps it instead of growing past the screen.
        intro = wrapped("Collections of documents the chat can answer from, indexed on this machine. "
                        "Choose them per chat in the chat page's Documents box.")
        vbox(intro, hbox(self.add_button, self.update_button, self.remove_button, self.vectors, STRETCH),
             (self.table, 1), hbox((self.progress, 1), self.cancel_button), self.status, self.index_size, parent=self)

        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.runner.progressed.connect(self._on_progressed)
        self.runner.finished.connect(self._on_finished)
        self.runner.failed.connect(self._on_failed)
        self.refresh()

    # --- the list ---------------------------------------------------------------------------------------
    def collections(self):
        from app.docs.store import Store

        with closing(Store()) as store:
            rows = [(c, store.problems(store.collection_id(c.name))) for c in store.collections()]
            self._size = store.size_bytes()
            self.interrupted = store.interrupted()
            return rows

    def refresh(self) -> None:
        from app.core.units import human_size

        rows = self.collections()
        selected = self.selected()
        self.table.setRowCount(len(rows))
        for r, (c, problems) in enumerate(rows):
            cells = [c.name, f"{c.files:,}", f"{c.chunks:,}", f"{c.vectors:,}", "; ".join(c.roots)]
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if problems:
                    item.setToolTip("\n".join(sentence for _, sentence in problems[:40]))
                self.table.setItem(r, col, item)
            if c.name in self.interrupted:
                self.table.item(r, 0).setText(f"{c.name} (interrupted)")
                self.table.item(r, 0).setData(Qt.UserRole, c.name)
                self.table.item(r, 0).setToolTip(interrupted_text([c.name]))
            if c.name == selected:
                self.table.selectRow(r)
        self.index_size.setText(f"Index: {human_size(self._size)} in the data folder" if rows else
                                "No collections yet: Add folder… makes one.")
        if self.interrupted and not self._interrupted_said:
            self._interrupted_said = True  # once: the table keeps the mark
            said = Notice(interrupted_text(self.interrupted), WARNING, "documents.interrupted", UNTIL_CLEARED)
            # At the next turn: the page's first listing runs while it is built, before the window listens.
            QTimer.singleShot(0, self, lambda: self.noticed.emit(said))
        self._update_buttons()

    def selected(self) -> str | None:
        return chosen_row_text(self.table)  # the name, without an "(interrupted)" mark

    def _update_buttons(self) -> None:
        busy = self.runner.running
        self.add_button.setEnabled(not busy)
        self.update_button.setEnabled(not busy and self.selected() is not None)
        self.remove_button.setEnabled(not busy and self.selected() is not None)
        self.cancel_button.setEnabled(busy and not self.runner.cancelling())
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)

    # --- actions ----------------------------------------------------------------------------------------
    def _on_add_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder to a collection")
        if not folder:
            return
        # The folder chosen is shown, with what it holds, before anything is indexed: a typed path and Enter once
        # chose its parent, and 97 files were queued instead of 5 (#49.20).
        name, ok = QInputDialog.getText(self, "Add a folder", f"{folder_summary(folder)}\n\nCollection name:",
                                        text=self.selected() or os.path.basename(folder.rstrip(os.sep)) or "documents")
        if ok and name.strip():
            self.add_folder(folder, name.strip())

    def add_folder(self, folder: str, collection: str) -> bool:
        """Index folder into collection in the background (what the button does after its dialogs)."""
        return self._start(collection, folder)

    def _on_update_clicked(self) -> None:
        if self.selected():
            self._start(self.selected(), None)

    def _start(self, collection: str, folder: str | None) -> bool:
        if not self.runner.start(collection, folder, self.vectors.isChecked()):
            return False
        self.progress.setRange(0, 0)  # busy until the walk has counted the files
        self._run_listed = False
        self.status.setText(f"Indexing {collection}…")
        self._update_buttons()
        return True

    def _on_remove_clicked(self) -> None:
        name = self.selected()
        if not name:
            return
        answer = QMessageBox.question(self, "Remove collection",
                                      f"Remove the collection {name} and its index? The files themselves stay.")
        if answer == QMessageBox.Yes:
            self.remove(name)

    def remove(self, name: str) -> None:
        from app.docs.store import Store

        with closing(Store()) as store:
            store.remove_collection(name)
        self.status.setText(f"Removed {name} and its index.")
        self.refresh()
        self.collections_changed.emit()

    # --- progress ---------------------------------------------------------------------------------------
    def _on_progressed(self, p) -> None:
        if not self._run_listed:  # the run has made its collection: both lists show it from now on
            self._run_listed = True
            self._changed()
        self.progress.setRange(0, max(1, p.total))
        self.progress.setValue(p.done)
        held = "" if self.runner.gate.is_set() else " · waiting while the model answers"
        if self.runner.cancelling():
            held = " · cancelling…"
        self.status.setText(f"Indexing {self.runner.collection}: {progress_text(p)}{held}")
        self.status.setToolTip(p.current or "")
        self._show_running_row(p)

    def _show_running_row(self, p) -> None:
        """The row of the collection being indexed counts what the progress line counts (#55 D7: the table said 20
        files and 240 chunks while the line said 1,325 of 3,000 files): one source for both."""
        for r in range(self.table.rowCount()):
            item = self.table.item(r, 0)
            if item is not None and (item.data(Qt.UserRole) or item.text()) == self.runner.collection:
                if p.phase == "text":
                    self.table.item(r, 1).setText(f"{p.done:,} of {p.total:,}")
                self.table.item(r, 2).setText(f"{p.chunks:,}")

    def _changed(self) -> None:
        self.refresh()
        self.collections_changed.emit()

    def cancel(self) -> None:
        self.runner.cancel()
        self.status.setText(f"Cancelling {self.runner.collection}: the file in hand is left for the next run…")
        self.cancel_button.setEnabled(False)

    def _on_finished(self, report) -> None:
        self.status.setText(report_text(report))
        self.status.setToolTip("")
        self.noticed.emit(cleared("documents.failed"))  # an earlier failed index is answered
        self._changed()
        if not self.interrupted:
            self.noticed.emit(cleared("documents.interrupted"))

    def _on_failed(self, message: str) -> None:
        self.status.setText(message)
        self.status.setToolTip("")
        self.noticed.emit(Notice(message, ERROR, "documents.failed"))
        self._changed()  # a run that failed may have made its collection

    def close_tasks(self) -> None:
        self.runner.join()
