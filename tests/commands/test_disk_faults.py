"""A full and a read-only data folder (issue 48, E16/E17), on real file systems: a 2 MB tmpfs filled up, and
one remounted read-only. `models import --link`, `tools add` and `docs add` gave chained tracebacks (and the
crash-log writer failed too); `docs list` and `docs search` called an intact index unusable and advised removing
it. Now: one sentence naming the disk and its free space, read-only use that works, no advice to delete."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.library.bundled import bundled_model_path

ROOT = Path(__file__).resolve().parents[2]


def _mount(point: Path, options: str) -> bool:
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                          capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs (mounting needs root: skipped without it); unmounted after the test."""
    point = tmp_path / "disk"
    point.mkdir()
    if os.geteuid() != 0 or not _mount(point, "size=2m"):
        pytest.skip("mounting a tmpfs needs root")
    yield point
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


def hearth(home: Path, *args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HEARTH_HOME": str(home), "HEARTH_NO_DISCOVERY": "1"},
                         stdin=subprocess.DEVNULL, cwd=ROOT)
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    return run


def fill(disk: Path) -> None:
    # Unbuffered: a buffered file's close flushes what the last write left behind and raises ENOSPC itself.
    with open(disk / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass


def folder_of_notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir(exist_ok=True)
    (folder / "boiler.md").write_text("# Boiler\nThe reset button is blue.\n", encoding="utf-8")
    return folder


def test_a_full_disk_is_one_sentence_with_the_disk_and_its_free_space(small_disk, tmp_path):
    home = small_disk / "home"
    notes = folder_of_notes(tmp_path)
    assert hearth(home, "docs", "add", str(notes), "-c", "home", "--no-vectors").returncode == 0
    fill(small_disk)
    full = f"the disk that holds it ({small_disk}) is full (0 B free)"

    linked = hearth(home, "models", "import", "--link", str(bundled_model_path()))
    assert linked.returncode == 1
    assert linked.stderr == f"hearth: library.json could not be saved in {home / 'data'}: {full}.\n"

    added = hearth(home, "tools", "add", "clock", "--", "mcp-server-time")
    assert added.returncode == 1
    assert added.stderr == f"hearth: mcp.json could not be saved in {home / 'config'}: {full}.\n"

    indexed = hearth(home, "docs", "add", str(notes), "-c", "other", "--no-vectors")
    assert indexed.returncode == 1 and full in indexed.stderr and "remove" not in indexed.stderr
    assert "the index itself is intact" in indexed.stderr

    # What is there is still listed and searched.
    assert hearth(home, "docs", "list").stdout.startswith("home: 1 files, 1 chunks")
    assert hearth(home, "docs", "search", "boiler reset", "--mode", "bm25").stdout.startswith("[1] boiler.md")


def test_a_read_only_data_folder_lists_and_searches_and_says_why_it_cannot_write(small_disk, tmp_path):
    home = small_disk / "home"
    notes = folder_of_notes(tmp_path)
    assert hearth(home, "docs", "add", str(notes), "-c", "home", "--no-vectors").returncode == 0
    assert hearth(home, "tools", "add", "clock", "--", "mcp-server-time").returncode == 0
    assert subprocess.run(["mount", "-o", "remount,ro", str(small_disk)]).returncode == 0
    read_only = f"the disk that holds it ({small_disk}) is read-only"

    listed = hearth(home, "docs", "list")
    assert listed.returncode == 0 and listed.stdout.startswith("home: 1 files, 1 chunks") and not listed.stderr
    found = hearth(home, "docs", "search", "boiler reset", "--mode", "bm25")
    assert found.returncode == 0 and found.stdout.startswith("[1] boiler.md § Boiler")
    assert hearth(home, "tools", "list").stdout.startswith("clock  stdio  mcp-server-time")
    models = hearth(home, "models", "list")
    assert models.returncode == 0 and "bundled" in models.stdout

    linked = hearth(home, "models", "import", "--link", str(bundled_model_path()))
    assert linked.returncode == 1
    assert linked.stderr == f"hearth: library.json could not be saved in {home / 'data'}: {read_only}.\n"
    added = hearth(home, "tools", "add", "other", "--", "mcp-server-time")
    assert added.returncode == 1 and read_only in added.stderr
    indexed = hearth(home, "docs", "add", str(notes), "-c", "home", "--no-vectors")
    assert indexed.returncode == 1 and indexed.stderr == (
        f"hearth: The documents' index {home / 'data' / 'docs.sqlite3'} can be searched but not changed: "
        f"{read_only}; the index itself is intact.\n")
    assert not (home / "logs").exists()  # nothing here was a bug


def test_the_crash_log_writer_never_raises(small_disk, monkeypatch):
    import tempfile

    from app.core.store.crashlog import write_crash_log

    monkeypatch.setenv("HEARTH_HOME", str(small_disk / "home"))
    fill(small_disk)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(small_disk))
    try:
        raise ValueError("a bug")
    except ValueError as exc:
        assert write_crash_log(exc) is None  # neither folder took it: no second error

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(small_disk.parent))
    try:
        raise ValueError("a bug")
    except ValueError as exc:
        path = write_crash_log(exc)  # the log folder is full: the temporary folder takes it
    assert path is not None and path.parent == small_disk.parent and "ValueError: a bug" in path.read_text()
