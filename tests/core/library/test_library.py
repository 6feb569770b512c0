"""The local library: Hearth's own files, imports, and read-only discovery of other apps' GGUFs."""

from __future__ import annotations

import json
import shutil

import pytest

from app.core import library, paths
from app.core.gguf.info import read_gguf_info
from app.core.library import index
from app.core.errors import HearthError, ModelFileError
from tests.core.gguf.test_gguf_info import write_tiny_gguf


@pytest.fixture
def other_apps(tmp_path, monkeypatch):
    """A fake home with models where HF, LM Studio, GPT4All and Ollama keep them."""
    home = tmp_path / "home"
    monkeypatch.setenv("HEARTH_DISCOVERY_HOME", str(home))
    monkeypatch.delenv("HEARTH_NO_DISCOVERY", raising=False)
    snap = home / ".cache/huggingface/hub/models--acme--Tiny-GGUF/snapshots/abc123"
    blobs = home / ".cache/huggingface/hub/models--acme--Tiny-GGUF/blobs"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    write_tiny_gguf(blobs / "deadbeef")
    (snap / "tiny-Q8_0.gguf").symlink_to(blobs / "deadbeef")
    lms = home / ".lmstudio/models/lmstudio-community/Tiny-GGUF"
    lms.mkdir(parents=True)
    write_tiny_gguf(lms / "tiny-lms-Q4_K_M.gguf", name="LMS Tiny")
    g4a = home / ".local/share/nomic.ai/GPT4All"
    g4a.mkdir(parents=True)
    write_tiny_gguf(g4a / "gpt4all-tiny.Q4_0.gguf")
    oll = home / ".ollama/models"
    (oll / "blobs").mkdir(parents=True)
    write_tiny_gguf(oll / "blobs" / ("sha256-" + "a" * 64))
    (oll / "blobs" / ("sha256-" + "b" * 64)).write_text('{"not": "gguf"}')  # a config blob
    manifest = oll / "manifests/registry.ollama.ai/library/tinyllama/latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "a" * 64},
        {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:" + "b" * 64}]}))
    return home


def _by_source(entries):
    out = {}
    for e in entries:
        out.setdefault(e.source, []).append(e)
    return out


def test_list_finds_bundled_own_and_other_apps_models(other_apps, bundled_model):
    own = paths.models_dir() / "acme__Tiny-GGUF"
    own.mkdir()
    write_tiny_gguf(own / "mine-Q4_K_M.gguf")
    (own / "partial.gguf.part").write_bytes(b"GGUF")  # an unfinished download is not a model
    found = _by_source(library.list_models())
    assert [e.path for e in found["bundled"]] == [str(bundled_model)]
    assert found["bundled"][0].architecture == "llama" and found["bundled"][0].quantization == "Q4_1"
    assert [e.name for e in found["hearth"]] == ["acme/Tiny-GGUF/mine-Q4_K_M.gguf"]
    assert [e.name for e in found["huggingface"]] == ["acme/Tiny-GGUF/tiny-Q8_0.gguf"]
    assert [e.name for e in found["lmstudio"]] == ["lmstudio-community/Tiny-GGUF/tiny-lms-Q4_K_M.gguf"]
    assert [e.name for e in found["gpt4all"]] == ["gpt4all-tiny.Q4_0.gguf"]
    assert [e.name for e in found["ollama"]] == ["tinyllama:latest"]  # the config blob is not GGUF
    for source in library.DISCOVERED_SOURCES:
        (entry,) = found[source]
        assert not entry.owned and entry.architecture == "llama" and entry.parameters > 0
        assert entry.context_length == 1024 and entry.size_bytes > 0


def test_discovery_can_be_turned_off(other_apps, monkeypatch):
    monkeypatch.setenv("HEARTH_NO_DISCOVERY", "1")
    assert {e.source for e in library.list_models()} == {"bundled"}


def test_split_sets_list_once_with_their_total_size(other_apps):
    folder = paths.models_dir() / "acme__Split"
    folder.mkdir()
    for i in (1, 2):
        write_tiny_gguf(folder / f"big-Q4_0-0000{i}-of-00002.gguf")
    (entry,) = [e for e in library.list_models() if e.source == "hearth"]
    assert entry.parts == 2 and entry.name.endswith("big-Q4_0-00001-of-00002.gguf")
    assert entry.size_bytes == sum(p.stat().st_size for p in folder.iterdir())
    removal = library.remove_model("big-Q4_0-00001-of-00002")
    assert len(removal.deleted) == 2 and not folder.exists()


@pytest.mark.parametrize("mode", ["copy", "move", "link"])
def test_import_modes(tmp_path, mode):
    src = write_tiny_gguf(tmp_path / "outside-Q4_0.gguf")
    entry = library.import_model(src, mode)
    assert entry.source == "imported" and entry.architecture == "llama"
    if mode == "link":
        assert entry.path == str(src.resolve()) and not entry.owned
    else:
        assert entry.owned and entry.path.startswith(str(paths.models_dir().resolve()))
        assert src.exists() == (mode == "copy")
    assert library.resolve("outside-Q4_0").path == entry.path
    removal = library.remove_model("outside-Q4_0")
    if mode == "link":
        assert removal.forgotten and not removal.deleted and src.exists()  # a linked file is never deleted
    else:
        assert removal.deleted == [entry.path] and not (paths.models_dir() / "imported" / src.name).exists()
    assert all(e.path != entry.path for e in library.list_models(discover_others=False))


def test_import_refuses_non_gguf_and_duplicates(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        library.import_model(bad, "copy")
    src = write_tiny_gguf(tmp_path / "dup.gguf")
    library.import_model(src, "copy")
    with pytest.raises(HearthError, match="already in Hearth's models folder"):
        library.import_model(src, "copy")


def test_rm_refuses_what_hearth_does_not_own(other_apps, bundled_model, tmp_path):
    with pytest.raises(HearthError, match="bundled model is part of Hearth"):
        library.remove_model("bundled")
    with pytest.raises(HearthError, match="belongs to LM Studio"):
        library.remove_model("tiny-lms-Q4_K_M")
    with pytest.raises(HearthError, match="belongs to Ollama"):
        library.remove_model("tinyllama:latest")
    loose = write_tiny_gguf(tmp_path / "loose.gguf")
    with pytest.raises(HearthError, match="not in Hearth's library"):
        library.remove_model(loose)
    assert loose.exists() and bundled_model.exists()
    assert (other_apps / ".lmstudio/models/lmstudio-community/Tiny-GGUF/tiny-lms-Q4_K_M.gguf").exists()


def test_resolve_unknown_name():
    with pytest.raises(ModelFileError, match="No model named 'nothing-here'"):
        library.resolve("nothing-here")


def test_broken_file_in_models_folder_is_listed_with_its_error():
    (paths.models_dir() / "broken.gguf").write_bytes(b"GGUF\x03\x00")
    (entry,) = [e for e in library.list_models(discover_others=False) if e.source == "hearth"]
    assert "truncated" in entry.error


def test_metadata_cache_is_refreshed_when_the_file_changes(tmp_path):
    target = paths.models_dir() / "x.gguf"
    write_tiny_gguf(target, ctx=1024)
    assert library.resolve("x").context_length == 1024
    write_tiny_gguf(tmp_path / "y.gguf", ctx=4096, layers=3)
    shutil.copy(tmp_path / "y.gguf", target)
    assert library.resolve("x").context_length == 4096


def test_processes_registering_at_once_keep_every_entry(tmp_path, hearth_home):
    """#18 item 10: the index is changed under a lock, so concurrent imports never lose one another's entries."""
    import os
    import subprocess
    import sys

    code = ("import sys\nfrom app.core import library\n"
            "for i in range(50): library.register(f'{sys.argv[1]}/m{i}.gguf', 'imported', False)\n")
    env = {**os.environ, "HEARTH_HOME": str(hearth_home)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"p{n}")], env=env) for n in range(8)]
    assert all(p.wait(120) == 0 for p in procs)
    assert len(index._index()) == 400


def test_an_import_copy_killed_midway_leaves_no_model_and_its_leftover_is_cleaned(tmp_path, bundled_model,
                                                                                 hearth_home):
    """#48 C14: a kill -9 during `models import --copy` left a partial file under the final name, listed as a
    model, and importing again was refused as a duplicate."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    src = tmp_path / "big.gguf"
    shutil.copyfile(bundled_model, src)
    with src.open("r+b") as fh:  # a sparse tail: a copy long enough to be caught in the middle
        fh.truncate(src.stat().st_size + 3 * 2**30)
    dest = paths.models_dir() / "imported"
    proc = subprocess.Popen([sys.executable, "-m", "app", "models", "import", "--copy", str(src)],
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            written = [f for f in dest.glob("*big.gguf*") if f.stat().st_size > 64 * 2**20] if dest.is_dir() else []
            if written:
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the copy ended before it could be interrupted"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert not (dest / "big.gguf").exists()  # never a partial file under the final name
    assert [f.name for f in dest.iterdir()] == [f".big.gguf.partial-{proc.pid}"]
    assert not [e for e in library.list_models(discover_others=False) if "big" in e.name]
    assert list(dest.iterdir()) == []  # its process is gone: the leftover is cleaned
    small = tmp_path / "small" / "big.gguf"
    small.parent.mkdir()
    shutil.copyfile(bundled_model, small)
    entry = library.import_model(small, "copy")  # not refused as a duplicate
    assert entry.path == str(dest / "big.gguf") and (dest / "big.gguf").stat().st_size == small.stat().st_size


def test_fifos_named_gguf_in_any_scanned_folder_are_never_opened(other_apps, tmp_path):
    """A FIFO blocks a plain open() until something writes to it: `hearth models list` hung for ever on one
    (issue 48). Every place the library scans holds one here; the listing runs in a child, so that a hang
    fails the test instead of holding it."""
    import os
    import subprocess
    import sys

    fifos = [paths.models_dir() / "blocker.gguf", other_apps / ".lmstudio/models/lmstudio-community/pipe.gguf",
             other_apps / ".cache/huggingface/hub/models--acme--Tiny-GGUF/snapshots/abc123/pipe-Q4_0.gguf",
             other_apps / ".local/share/nomic.ai/GPT4All/pipe.gguf", other_apps / ".ollama/models/blobs/sha256-fifo"]
    for fifo in fifos:
        os.mkfifo(fifo)
    linked = tmp_path / "linked.gguf"  # imported by link once, a FIFO now
    write_tiny_gguf(linked)
    library.import_model(linked, mode="link")
    linked.unlink()
    os.mkfifo(linked)
    code = "import json; from app.core import library; print(json.dumps([e.path for e in library.list_models()]))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    names = [os.path.basename(p) for p in listed]
    assert names and not {"blocker.gguf", "pipe.gguf", "pipe-Q4_0.gguf", "sha256-fifo"} & set(names), names
    with pytest.raises(ModelFileError, match="FIFO"):
        read_gguf_info(fifos[0])


def test_a_fifo_given_as_the_model_is_one_sentence(tmp_path):
    import os

    from app.core.gguf.modelfile import check_model_file

    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(ModelFileError, match="is a FIFO, not a GGUF model file"):
        check_model_file(fifo)


@pytest.mark.parametrize("bad", [{"path": 5, "source": "imported", "owned": False},
                                 {"path": "/elsewhere/x.gguf", "source": {"kind": "imported"}, "owned": False},
                                 {"path": "/elsewhere/y.gguf", "source": "imported", "owned": "yes"},
                                 {"path": "relative.gguf", "source": "imported"}, ["not", "an", "entry"]])
def test_one_badly_typed_library_entry_is_kept_aside_and_the_rest_listed(tmp_path, hearth_home, bad):
    """#56 A3: `"path": 5` or `"source": {...}` in library.json was `hearth: internal error (TypeError)` in `models
    list` and `models import`. The entry is kept aside (the file copied as it was) and said in one sentence, the
    other imports are listed, and an import after it keeps them."""
    import os
    import subprocess
    import sys

    linked = tmp_path / "linked.gguf"
    write_tiny_gguf(linked)
    index = library.index_file()
    index.parent.mkdir(parents=True, exist_ok=True)
    good = {"path": str(linked), "source": "imported", "owned": False, "added": 1.0}
    raw = json.dumps({"models": [bad, good]}).encode()
    index.write_bytes(raw)
    env = {**os.environ, "HEARTH_HOME": str(hearth_home), "HEARTH_NO_DISCOVERY": "1"}

    def hearth(*args):
        return subprocess.run([sys.executable, "-m", "app", "models", *args], capture_output=True, text=True,
                              timeout=120, env=env, stdin=subprocess.DEVNULL)

    listed = hearth("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [e["path"] for e in json.loads(listed.stdout) if e["source"] == "imported"] == [str(linked)]
    (kept,) = index.parent.glob("library.json.bad-*")
    assert kept.read_bytes() == raw  # nothing written over: the file as it was
    said = [line for line in listed.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and "library.json had 1 entry Hearth cannot use" in said[0] and kept.name in said[0]
    assert "Traceback" not in listed.stderr and "internal error" not in listed.stderr

    other = tmp_path / "other.gguf"
    write_tiny_gguf(other)
    imported = hearth("import", str(other))
    assert imported.returncode == 0, imported.stderr
    assert "cannot use" not in imported.stderr  # said once: the entry is out of the file now
    assert {e["path"] for e in json.loads(index.read_text())["models"]} == {str(linked), str(other)}
    assert list(index.parent.glob("library.json.bad-*")) == [kept]


def test_a_badly_typed_import_in_the_index_file_is_said_in_models_import_too(tmp_path, hearth_home):
    """The first command to meet it may be an import: the same sentence, the import done, the rest kept."""
    import os
    import subprocess
    import sys

    index = library.index_file()
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(json.dumps({"models": [{"path": 5}, {"path": "/elsewhere/kept.gguf", "source": "imported"}]}))
    new = tmp_path / "new.gguf"
    write_tiny_gguf(new)
    run = subprocess.run([sys.executable, "-m", "app", "models", "import", str(new)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "HEARTH_HOME": str(hearth_home), "HEARTH_NO_DISCOVERY": "1"},
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    assert "library.json had 1 entry Hearth cannot use" in run.stderr and "Traceback" not in run.stderr
    assert [e["path"] for e in json.loads(index.read_text())["models"]] == ["/elsewhere/kept.gguf", str(new)]


def test_other_apps_metadata_files_are_read_within_a_bound(other_apps, tmp_path):
    """#56 C10: a 3 GB sparse file among Ollama's manifests was read whole (`models list`: 20.7 s, 6.3 GB). Every
    file the scan reads is read within a bound; one past it, or not a manifest at all, is passed over, and the
    other models are listed."""
    import os
    import subprocess
    import sys

    manifests = other_apps / ".ollama/models/manifests/registry.ollama.ai/library"
    huge = manifests / "huge" / "latest"
    huge.parent.mkdir(parents=True)
    with huge.open("wb") as fh:
        fh.write(b'{"layers": [')
        fh.truncate(3 * 2**30)  # sparse: no disk, 3 GB to read
    odd = ['{"layers": [{"mediaType": "x.model", "digest": 5}]}', '{"layers": {"a": 1}}', '[1, 2]',
           '{"layers": [' * 10_000, "\xff"]  # not manifests Ollama writes: passed over, never a crash
    for i, text in enumerate(odd):
        (manifests / f"odd{i}").mkdir()
        (manifests / f"odd{i}" / "latest").write_text(text, encoding="latin-1")
    code = ("import contextlib, io, json\nfrom app.cli import main\nfrom app.core.metrics import peak_rss_mb\n"
            "import time\nt0 = time.monotonic()\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n"
            "    rc = main(['models', 'list', '--json'])\n"
            "print(json.dumps({'rc': rc, 's': time.monotonic() - t0, 'peak_mb': peak_rss_mb(), "
            "'listed': json.loads(buf.getvalue())}))")
    try:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "HEARTH_DISCOVERY_HOME": str(other_apps)})
    finally:
        huge.unlink()
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["rc"] == 0 and "Traceback" not in run.stderr
    ollama = [e["name"] for e in out["listed"] if e["source"] == "ollama"]
    assert ollama == ["tinyllama:latest"]
    assert out["s"] < 10 and out["peak_mb"] < 300, out
