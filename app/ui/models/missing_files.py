"""A library row whose file went away (moved, deleted, an unmounted disk), on the Models page (#49.8).

It vanished from the table without a word, even while it was the loaded model (which still runs from memory),
and the status bar went on naming a model the library no longer had. Now the row stays, marked "file missing",
with what the user can do about it: Locate… (choose where the file is now: it is linked there, and its load
settings go with it) or Remove from library (its record; there is no file to delete). It cannot be loaded or
quantized until it is found.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.ui.models import manager
from app.ui.widgets import button

MARK = "file missing"
COLOUR = "#ef4444"


def is_missing(row: dict | None) -> bool:
    return bool(row and row.get("missing"))


def with_last_known(rows: list[dict], before: list[dict]) -> list[dict]:
    """Missing rows keep the name, type and size the library last read from their file (the file is gone, and so
    is its cached header): the window goes on naming the model as it did."""
    known = {r.get("path"): r for r in before if not r.get("missing")}
    out = []
    for row in rows:
        last = known.get(row.get("path")) if row.get("missing") else None
        if last is not None:
            row = {**last, "source": last.get("source", row.get("source")), "missing": True}
        out.append({**row, "error": f"The file is no longer at {row['path']}."} if row.get("missing") else row)
    return out


class MissingFiles(QObject):
    """The Models page's Locate… button, and what Locate and Remove do to a missing row."""

    def __init__(self, page):
        """page: the ModelsView (its table, buttons, tasks and the loaded model)."""
        super().__init__(page)
        self.page = page
        self.locate_button = button("Locate…", lambda: self.locate(),
                                    "This model's file is no longer where it was: choose where it is now")
        self.locate_button.hide()
        self._shown = False  # whether the chosen row was shown as missing

    def changed(self) -> bool:
        """The chosen row's file went away or came back since it was shown."""
        return (self.selected() is not None) != self._shown

    def selected(self) -> dict | None:
        path = self.page.selected_path()
        row = next((m for m in self.page.models if m.get("path") == path), None)
        return row if is_missing(row) else None

    def mark(self, item, row: dict, loaded: bool) -> str:
        """The table's name cell of a missing row: the mark leads the name (a narrow column elides its end)."""
        item.setForeground(QColor(COLOUR))
        item.setToolTip(f"{row['path']}\nThe file is no longer there: Locate… it, or remove it from the library.")
        return f"✖ {row.get('name', '')} ({'loaded, ' if loaded else ''}{MARK})"

    def show_selection(self) -> bool:
        """The buttons and details for the chosen row; True when it is a missing one (nothing to inspect)."""
        row = self.selected()
        page = self.page
        self._shown = row is not None
        self.locate_button.setVisible(row is not None)
        page.delete_button.setText("Remove from library" if row is not None else "Delete")
        page.quantize_button.setEnabled(row is None)
        page.load_button.setEnabled(row is None and not page.bridge.loading)
        if row is None:
            return False
        loaded = page.loaded_path() == row["path"]
        page.details.setText(
            f"<b>{html.escape(page.title(row['path']))}</b><p style='color:{COLOUR}'>The file is no longer at "
            f"{html.escape(row['path'])}.</p><p>"
            + ("It is still loaded and answers from memory until another model is loaded. " if loaded else "")
            + "Locate… it where it is now, or remove it from the library.</p>")
        page.fit_label.setText("")
        return True

    def locate(self, new_path: str | None = None) -> None:
        row = self.selected()
        if row is None:
            return
        if new_path is None:
            new_path, _ = QFileDialog.getOpenFileName(self.page, f"Where is {Path(row['path']).name} now?",
                                                      str(Path(row["path"]).parent), "GGUF models (*.gguf)")
            if not new_path:
                return
        old = row["path"]

        def done(entry: dict) -> None:
            page = self.page
            found = entry.get("path") or new_path
            page.move_model(old, found)
            page._said_plainly(f"Found {Path(found).name} at {Path(found).parent}; it is back in the library.",
                               "models.missing")
            page._select_after_refresh = found
            page.refresh()

        self.page.tasks.run(lambda: manager.relocate(old, new_path), done,
                            lambda m: self.page.show_error(m, "models.missing"), "locate")

    def remove(self) -> None:
        row = self.selected()
        if row is None:
            return
        page = self.page
        if page.loaded_path() == row["path"]:
            page.show_error("This model is loaded (from memory); load another one before removing it.",
                            "models.missing")
            return
        asked = QMessageBox.question(page, "Remove from library",
                                     f"{row['path']} is no longer there. Remove it from the library?")
        if asked == QMessageBox.Yes:
            self.forget(row["path"])

    def forget(self, path: str) -> None:
        page = self.page
        page.move_model(path, None)
        page.tasks.run(lambda: manager.forget_missing(path), lambda _r: page.refresh(),
                       lambda m: page.show_error(m, "models.missing"), "forget")
