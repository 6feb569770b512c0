"""Search Hugging Face for GGUF models; with no query, the curated recommended list.

Results are a tree: a repository with its GGUF files (size, quantization). A
search runs on a Tasks thread; an answer that arrives after a newer search
started is dropped, so typing fast never shows stale results.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLineEdit, QTreeWidget, QTreeWidgetItem, QWidget

from app.core.units import human_size
from app.ui.models import manager
from app.ui.bridge.worker import Tasks
from app.ui.widgets import button, hbox, vbox, wrapped

COLUMNS = ["Model / file", "Type", "Size", "Downloads"]
FILE_ROLE = Qt.UserRole  # (repo_id, filename or None)


class HubPanel(QWidget):
    download_requested = Signal(str, object)  # repo_id, filename (None: the default choice)
    results_shown = Signal(int)  # rows at the top level
    error_reported = Signal(str)  # a search that failed: said by the page, as its other failures are

    def __init__(self, tasks: Tasks, parent=None):
        super().__init__(parent)
        self.tasks = tasks
        self._asked = ""  # the search last asked for ("" for the recommended list)
        self.query = QLineEdit(placeholderText="Search Hugging Face (e.g. qwen 0.5b), empty for recommendations")
        self.query.setClearButtonEnabled(True)
        self.search_button = button("Search", self.search)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setSelectionMode(QAbstractItemView.SingleSelection)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        for col in (1, 2, 3):
            header.setSectionResizeMode(col, QHeaderView.ResizeToContents)
        self.note = wrapped(name="hint")
        self.download_button = button("Download", self._on_download_clicked)
        self.download_button.setEnabled(False)
        vbox(hbox((self.query, 1), self.search_button), (self.tree, 1), hbox((self.note, 1), self.download_button),
             parent=self, margin=6)

        self.query.returnPressed.connect(self.search)
        self.tree.itemSelectionChanged.connect(self._on_selection_changed)
        self.tree.itemDoubleClicked.connect(lambda *_: self._on_download_clicked())

    # --- searching -------------------------------------------------------------------
    def search(self) -> None:
        text = self.query.text().strip()
        self._asked = text
        self.search_button.setEnabled(False)
        if text:
            self.note.setText(f"Searching for “{text}”…")
            self.tasks.run(lambda: manager.search(text), self._on_found, self._on_failed, "search", latest=True)
        else:
            self.note.setText("Loading the recommended models…")
            # The same name as a search: whichever was asked last is shown.
            self.tasks.run(manager.recommended, self._on_recommended, self._on_failed, "search", latest=True)

    def _on_failed(self, message: str) -> None:
        """The sentence is the page's to say (its red line and the status bar, where a failed download says the
        same): the note only tells what the list shows. It said the sentence too, so an offline Hugging Face
        was said in three places at once (#55 F)."""
        self.search_button.setEnabled(True)
        asked = f"The search for “{self._asked}”" if self._asked else "Loading the recommended models"
        self.note.setText(f"{asked} did not finish" + ("; the list is the one shown before." if
                                                         self.tree.topLevelItemCount() else "."))
        self.error_reported.emit(message)

    def _on_found(self, repos: list[dict]) -> None:
        self.search_button.setEnabled(True)
        self.tree.clear()
        self.tree.setColumnHidden(3, False)
        for repo in repos:
            downloads = f"{repo['downloads']:,}" if repo.get("downloads") is not None else ""
            name = repo["repo_id"] + ("  (gated: needs a token)" if repo.get("gated") else "")
            top = QTreeWidgetItem([name, "", "", downloads])
            top.setData(0, FILE_ROLE, (repo["repo_id"], None))
            for f in repo["files"]:
                parts = f" ({f['parts']} parts)" if f.get("parts", 1) > 1 else ""
                child = QTreeWidgetItem([f["filename"] + parts, self._type(f.get("quant")),
                                         human_size(f["size"]) if f.get("size") else "", ""])
                child.setData(0, FILE_ROLE, (repo["repo_id"], f["filename"]))
                top.addChild(child)
            self.tree.addTopLevelItem(top)
        if len(repos) <= 3:
            self.tree.expandAll()
        self.note.setText(f"{len(repos)} repositories with GGUF files." if repos else
                          "No repository with GGUF files matches; try fewer words.")
        self.results_shown.emit(len(repos))

    def _on_recommended(self, rows: list[dict]) -> None:
        self.search_button.setEnabled(True)
        self.tree.clear()
        self.tree.setColumnHidden(3, True)  # the curated list has no download counts: room for the names
        for m in rows:
            top = QTreeWidgetItem([m["title"], self._type(m.get("quant")),
                                   human_size(m["size"]) if m.get("size") else "", ""])
            tip = f"{m['repo_id']} / {m['filename']}\nGood at: {m['note']}"
            if m.get("draft"):
                tip += f"\nDraft model for speculative decoding: {m['draft']}"
            top.setToolTip(0, tip)
            top.setData(0, FILE_ROLE, (m["repo_id"], m.get("filename")))
            note = QTreeWidgetItem([m["note"], "", "", ""])
            note.setFlags(Qt.ItemIsEnabled)
            note.setData(0, FILE_ROLE, (m["repo_id"], m.get("filename")))
            top.addChild(note)
            self.tree.addTopLevelItem(top)
            note.setFirstColumnSpanned(True)
        self.tree.expandAll()
        self.note.setText("Recommended models. Type to search Hugging Face.")
        self.results_shown.emit(len(rows))

    @staticmethod
    def _type(quant: str | None) -> str:
        seed = manager.seed_name(quant)
        return f"{quant} ({seed})" if quant and seed and seed not in quant else (quant or "")

    # --- choosing --------------------------------------------------------------------
    def chosen(self) -> tuple[str, str | None] | None:
        items = self.tree.selectedItems()
        return items[0].data(0, FILE_ROLE) if items else None

    def _on_selection_changed(self) -> None:
        choice = self.chosen()
        self.download_button.setEnabled(choice is not None)
        if choice is not None:
            repo, filename = choice
            self.download_button.setToolTip(f"Download {filename or 'the recommended file of ' + repo}")

    def _on_download_clicked(self) -> None:
        choice = self.chosen()
        if choice is not None:
            self.download_requested.emit(*choice)

    def select(self, repo_id: str, filename: str | None) -> bool:
        """Select a result row (tests, and the screenshot script)."""
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            for item in [top, *(top.child(j) for j in range(top.childCount()))]:
                if item.data(0, FILE_ROLE) == (repo_id, filename):
                    self.tree.setCurrentItem(item)
                    return True
        return False
