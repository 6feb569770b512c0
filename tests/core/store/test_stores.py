"""Every JSON store's one rule (app/core/store/jsonstore.py): a damaged file is kept aside byte for byte, said once and
never written over; writes are locked read-modify-writes of what changed; a failed write is a sentence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core import library, paths
from app.core.library import index as library_index


from app.core.store import jsonstore

from app.ui.chat import preset_store as prompt_presets

from app.ui.settings import store as settings
DAMAGE = {
    "torn": b'{"models": [{"path": "/somewhere/linked.gguf", "source": "imported", "ow',  # a torn write
    "not utf-8": b'{"a": "\xff\xfe"}',
    "wrong shape": b'[1, 2, 3]\n',  # JSON, but not what the store keeps
}


def _read_machine_facts():
    from app.backends import runtime_choice

    return runtime_choice.remembered_failures()


def _write_machine_facts():
    from app.backends import runtime_choice

    runtime_choice._keep(runtime_choice.FACTS_KEY, "some-runtime", "it failed")


def _write_permission():
    from app.tools.servers import allow_always

    allow_always("files", "read")


def _read_permission():
    from app.tools.servers import allowed_tools

    return allowed_tools("files")


def _read_quality():
    from app.bench.quality_store import quality_for

    return quality_for("/no/such/model.gguf")


def _quality_file():
    from app.bench.quality_store import store_path

    return store_path()


def _write_quality():
    from app.bench.quality_store import store_path

    jsonstore.update_json(store_path(), lambda data: {**data, "x": {}}, {}, valid=jsonstore.is_object)


STORES = {
    "settings": (paths.settings_file, settings.load_settings, lambda: settings.update_settings(theme="dark")),
    "library": (library.index_file, library_index._index,
                lambda: library.register(Path("/elsewhere/new.gguf"), "imported", owned=False)),
    "presets": (prompt_presets.presets_file, prompt_presets.load_presets,
                lambda: prompt_presets.save_preset("Mine", "Be kind.")),
    "tool permissions": (paths.tool_permissions_file, _read_permission, _write_permission),
    "machine facts": (paths.machine_facts_file, _read_machine_facts, _write_machine_facts),
    "quality": (_quality_file, _read_quality, _write_quality),
}


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("store", STORES)
def test_a_damaged_store_is_kept_aside_said_once_and_never_written_over(store, damage):
    """#48 C12: a damaged library.json was read as empty, silently, and the next import wrote over it."""
    where, read, write = STORES[store]
    path = where()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(DAMAGE[damage])
    jsonstore.take_notices()

    read()
    said = jsonstore.take_notices()
    kept = list(path.parent.glob(path.name + ".bad-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == DAMAGE[damage]
    assert len(said) == 1 and path.name in said[0] and kept[0].name in said[0]

    read()
    assert jsonstore.take_notices() == []  # said once
    write()
    write()
    assert kept[0].read_bytes() == DAMAGE[damage]  # the next writes lose nothing of it
    assert list(path.parent.glob(path.name + ".bad-*")) == kept
    json.loads(path.read_text(encoding="utf-8"))
    read()
    assert jsonstore.take_notices() == []


def test_a_second_damage_is_kept_beside_the_first(tmp_path):
    path = tmp_path / "store.json"
    for text in (b"{one", b"{two"):
        path.write_bytes(text)
        assert jsonstore.read_json(path, {}) == {}
    assert sorted(p.read_bytes() for p in tmp_path.glob("store.json.bad-*")) == [b"{one", b"{two"]
    assert len(jsonstore.take_notices()) == 2


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_damaged_store_that_cannot_be_kept_aside_is_not_written_over(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "store.json"
    path.write_bytes(b"{torn")
    (folder / "store.json.lock").write_bytes(b"")
    folder.chmod(0o500)
    try:
        assert jsonstore.read_json(path, {}) == {}
        with pytest.raises(jsonstore.StoreError):
            jsonstore.update_json(path, lambda d: {"new": 1}, {})
        assert path.read_bytes() == b"{torn"
    finally:
        folder.chmod(0o700)


def test_a_write_that_fails_is_one_sentence_not_swallowed(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(jsonstore.StoreWriteError) as caught:
        jsonstore.update_json(blocker / "settings.json", lambda d: {"a": 1}, {})
    assert "settings.json could not be saved in" in str(caught.value) and "\n" not in str(caught.value)


def test_a_library_import_after_damage_keeps_the_linked_imports_of_the_kept_copy():
    path = library.index_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(DAMAGE["torn"])
    library.register(Path("/elsewhere/new.gguf"), "imported", owned=False)
    [kept] = path.parent.glob("library.json.bad-*")
    assert b"/somewhere/linked.gguf" in kept.read_bytes()
    assert [e["path"] for e in library_index._index()] == [str(Path("/elsewhere/new.gguf").resolve())]


WRITER = """
import sys
from app.ui.settings.store import update_settings
tag = sys.argv[1]
for i in range(200):
    update_settings(**{f"{tag}{i}": i})
"""


def test_two_processes_changing_settings_at_once_lose_nothing(hearth_home):
    """#48 C13: settings written whole without a lock lost 167 of 400 changes."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, tag], env=env) for tag in ("a", "b")]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    data = json.loads(paths.settings_file().read_text(encoding="utf-8"))
    assert {k: v for k, v in data.items() if k[0] in "ab"} == {f"{t}{i}": i for t in "ab" for i in range(200)}


def test_save_settings_writes_only_its_keys_into_the_file_as_it_is_now():
    settings.update_settings(theme="dark", enter_sends=False)
    settings.save_settings({"theme": "light"})  # a window whose start-up copy had no enter_sends
    assert settings.load_settings() == {"theme": "light", "enter_sends": False}
    assert settings.changed_keys({"theme": "light", "sampling": {"a": 1}},
                                 {"theme": "light", "sampling": {"a": 2}, "new": 1}) == {"sampling": {"a": 2}, "new": 1}


def test_a_store_lock_held_past_the_wait_is_busy_not_damage(tmp_path):
    path = tmp_path / "store.json"
    jsonstore.write_json(path, {"kept": 1})
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(jsonstore.StoreBusy, match="is busy"), jsonstore.locked(path, timeout=0.3):
            pass
    finally:
        holder.communicate("go\n", timeout=10)
    assert jsonstore.read_json(path) == {"kept": 1} and not list(tmp_path.glob("*.bad-*"))


HOLD_LOCK = """
import sys
from pathlib import Path
from app.core.store.jsonstore import locked
with locked(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_the_cli_says_a_damaged_library_once(hearth_home):
    path = library.index_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(DAMAGE["torn"])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]), "HEARTH_NO_DISCOVERY": "1"}
    first = subprocess.run([sys.executable, "-m", "app", "models", "list"], capture_output=True, text=True,
                           env=env, timeout=120, check=False)
    assert first.returncode == 0 and first.stderr.count("library.json was damaged") == 1, first.stderr
    again = subprocess.run([sys.executable, "-m", "app", "models", "list"], capture_output=True, text=True,
                           env=env, timeout=120, check=False)
    assert "damaged" not in again.stderr
    [kept] = path.parent.glob("library.json.bad-*")
    assert kept.read_bytes() == DAMAGE["torn"]


def test_a_damaged_store_whose_disk_refuses_the_move_is_not_written_over(tmp_path, monkeypatch):
    """The read-only case where this machine's tests run as root (who writes anyway): the move aside fails."""
    import errno

    path = tmp_path / "store.json"
    path.write_bytes(b"{torn")

    def refuse(*_args):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(jsonstore.os, "rename", refuse)
    jsonstore.take_notices()
    assert jsonstore.read_json(path, {}) == {}
    assert "could not be kept aside" in jsonstore.take_notices()[0]
    with pytest.raises(jsonstore.StoreError, match="did not write over it"):
        jsonstore.update_json(path, lambda d: {"new": 1}, {})
    assert path.read_bytes() == b"{torn"


# One entry of the wrong type among sound ones, for each store of entries: (its file, its reader, a writer, its data,
# whether what the reader gives keeps the sound entry and only sound ones).
BAD_ENTRY = {
    "library": (library.index_file, library_index._index,
                lambda: library.register(Path("/elsewhere/new.gguf"), "imported", owned=False),
                {"models": [{"path": "/elsewhere/good.gguf", "source": "imported"}, {"path": 5, "source": {}}]},
                lambda got: "/elsewhere/good.gguf" in [e["path"] for e in got]
                and all(isinstance(e["path"], str) for e in got)),
    "presets": (prompt_presets.presets_file, prompt_presets.load_presets,
                lambda: prompt_presets.save_preset("Mine", "Be kind."),
                {"presets": [{"name": "Kept", "text": "Hi."}, {"name": ["x"], "text": 5}]},
                lambda got: {"name": "Kept", "text": "Hi."} in got and all(isinstance(p["name"], str) for p in got)),
    "tool permissions": (paths.tool_permissions_file, _read_permission, _write_permission,
                         {"files": ["read"], "other": [{"unhashable": True}]},
                         lambda got: "read" in got and all(isinstance(t, str) for t in got)),
}


@pytest.mark.parametrize("store", BAD_ENTRY)
def test_one_bad_entry_costs_only_itself_kept_aside_and_said_once(store):
    """#56 A3 and its siblings: an entry of the wrong type crashed its store's reader (TypeError) or, for the
    presets, was left out silently and lost at the next save. Now the file is copied aside as it was, the entry
    taken out and said once, the other entries read, and the writes after it keep them."""
    where, read, write, data, sound = BAD_ENTRY[store]
    path = where()
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(data).encode()
    path.write_bytes(raw)
    jsonstore.take_notices()

    assert sound(read())
    said = jsonstore.take_notices()
    (kept,) = path.parent.glob(path.name + ".bad-*")
    assert kept.read_bytes() == raw
    assert len(said) == 1 and "1 entry Hearth cannot use" in said[0] and kept.name in said[0]
    assert sound(read()) and jsonstore.take_notices() == []
    write()
    write()
    assert sound(read())
    assert jsonstore.take_notices() == [] and list(path.parent.glob(path.name + ".bad-*")) == [kept]


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_bad_entry_in_a_read_only_folder_is_left_out_and_the_file_never_written(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "store.json"
    raw = json.dumps({"models": [{"path": "/a/good.gguf"}, {"path": 5}]}).encode()
    path.write_bytes(raw)
    (folder / "store.json.lock").write_bytes(b"")
    folder.chmod(0o500)
    try:
        got = jsonstore.read_json(path, {}, valid=library_index._index_shape, clean=library_index._sound_entries)
        assert got == {"models": [{"path": "/a/good.gguf"}]}
        said = jsonstore.take_notices()
        assert len(said) == 1 and "cannot use" in said[0] and "will not write over" in said[0]
        with pytest.raises(jsonstore.StoreError):
            jsonstore.update_json(path, lambda d: d, {}, valid=library_index._index_shape, clean=library_index._sound_entries)
        assert path.read_bytes() == raw
    finally:
        folder.chmod(0o700)
