"""Add folder… shows the folder chosen, and what it holds, before indexing (#49.20: a typed path and Enter chose
the parent folder, and 97 files were queued instead of 5)."""

from __future__ import annotations

from PySide6.QtWidgets import QFileDialog, QInputDialog


def test_add_folder_names_the_folder_and_its_files_before_indexing(qtbot, idle_window, tmp_path, monkeypatch):
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "a.md").write_text("# A\nOne.\n", encoding="utf-8")
    (folder / "b.txt").write_text("Two.\n", encoding="utf-8")
    (tmp_path / "elsewhere.md").write_text("Not in the folder.\n", encoding="utf-8")
    asked = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))

    def get_text(_parent, title, label, **kwargs):
        asked.append((title, label, kwargs.get("text")))
        return "papers", True

    monkeypatch.setattr(QInputDialog, "getText", get_text)
    page = idle_window.documents
    page.vectors.setChecked(False)
    with qtbot.waitSignal(page.runner.finished, timeout=30_000) as ended:
        page.add_button.click()
    title, label, suggested = asked[0]
    assert label.startswith(f"Index {folder}: 2 files (") and label.endswith("Collection name:")
    assert suggested == "papers"
    assert ended.args[0].added == 2
