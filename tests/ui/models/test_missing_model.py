"""A model whose file is moved away while it is loaded (#49.8): it vanished from the library without a word while
the status bar still named it. It stays, marked "file missing", named as before, and the user can locate the
file or remove the row."""

from __future__ import annotations

import shutil

from PySide6.QtWidgets import QMessageBox

LOAD_MS = 60_000
WAIT_MS = 10_000


def row_of(w, path):
    return next((m for m in w.models.models if m.get("path") == path), None)


def refresh(qtbot, w, until):
    w.models.refresh()
    qtbot.waitUntil(lambda: bool(until()), timeout=WAIT_MS)  # a None from until would pass at once


def test_a_loaded_model_moved_away_stays_marked_and_can_be_located_or_removed(qtbot, main_window, bundled_model,
                                                                             tmp_path, monkeypatch):
    w = main_window
    w.tabs.setCurrentWidget(w.models)
    here = tmp_path / "here"
    here.mkdir()
    copy = here / "travelling.gguf"
    shutil.copy(bundled_model, copy)
    w.models.import_file(str(copy))
    qtbot.waitUntil(lambda: w.models.selected_path() == str(copy), timeout=WAIT_MS)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_MS,
                          check_params_cb=lambda info: info.get("path") == str(copy)):
        w.load_chosen_model(w.models.options_for(str(copy)))
    named = w.model_label.text()
    assert named.startswith("travelling")

    away = tmp_path / "elsewhere"
    away.mkdir()
    moved = away / "travelling.gguf"
    copy.rename(moved)
    refresh(qtbot, w, lambda: (row_of(w, str(copy)) or {}).get("missing"))
    row = w.models.models.index(row_of(w, str(copy)))
    cell = w.models.table.item(row, 0).text()
    assert "travelling" in cell and "(loaded, file missing)" in cell
    # The status bar and the chat's picker go on naming it, and say the file is missing.
    assert w.model_label.text() == f"{named} (file missing)"
    assert w.chat.picker.combo.currentText() == f"{named} (file missing)"
    w.models.table.selectRow(row)
    assert w.models.missing.locate_button.isVisible() and w.models.delete_button.text() == "Remove from library"
    assert not w.models.load_button.isEnabled() and "no longer at" in w.models.details.text()
    w.models.delete_button.click()  # still loaded: refused, in words
    assert "This model is loaded" in w.statusBar().currentMessage()

    w.models.missing.locate(str(moved))
    qtbot.waitUntil(lambda: row_of(w, str(moved)) is not None and row_of(w, str(copy)) is None, timeout=WAIT_MS)
    assert not row_of(w, str(moved)).get("missing") and w.models.selected_path() == str(moved)
    assert "Found travelling.gguf" in w.statusBar().currentMessage()
    assert w.models.load_button.isEnabled() and not w.models.missing.locate_button.isVisible()
    assert w.model_label.text() == named and w.chat.picker.combo.currentText() == named  # found: named as before
    assert "(loaded)" in w.models.table.item(w.models.models.index(row_of(w, str(moved))), 0).text()

    # Not loaded, moved away again: Remove from library takes the row away (the file is not there to delete).
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_MS):
        w.load_chosen_model(w.models.options_for(str(bundled_model)))
    moved.rename(here / "gone-for-good.gguf")
    refresh(qtbot, w, lambda: (row_of(w, str(moved)) or {}).get("missing"))
    w.models.table.selectRow(w.models.models.index(row_of(w, str(moved))))
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.Yes)
    w.models.delete_button.click()
    qtbot.waitUntil(lambda: row_of(w, str(moved)) is None and not w.models.tasks.busy(), timeout=WAIT_MS)
    w.models.refresh()
    qtbot.waitUntil(lambda: not w.models.tasks.busy(), timeout=WAIT_MS)
    assert row_of(w, str(moved)) is None
