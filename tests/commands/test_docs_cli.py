"""`hearth docs` and `hearth chat --docs / --attach` as a user runs them: real subprocesses, the real index, the
embedding GGUF made by Hearth's convert, the bundled chat model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.docs.parsers import full_text, parse
from tests.docs.conftest import docs_folder, embed_gguf  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def hearth(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def test_add_list_search_and_rm(docs_folder, embed_gguf, monkeypatch):
    env = {"HEARTH_EMBED_MODEL": str(embed_gguf)}
    (docs_folder / "blob.dat").write_bytes(bytes(range(256)) * 4)
    add = hearth("docs", "add", str(docs_folder), "--collection", "home", env=env)
    assert add.returncode == 0, add.stderr
    assert "Indexed: home: 7 added" in add.stdout and "embedded" in add.stdout
    assert "hearth: blob.dat is a binary file, not text." in add.stderr and "Traceback" not in add.stderr

    listed = json.loads(hearth("docs", "list", "--json").stdout)
    (home,) = listed["collections"]
    assert home["name"] == "home" and home["files"] == 7 and home["chunks"] == home["vectors"] > 0
    assert listed["index_bytes"] > 0

    found = hearth("docs", "search", "Where is the boiler's reset?", "--json", env=env)
    assert found.returncode == 0, found.stderr
    best = json.loads(found.stdout)[0]
    assert best["where"] == "manual.pdf p. 2" and set(best["ranks"]) == {"bm25", "vector"}
    plain = hearth("docs", "search", "boiler reset", "-c", "home", "--mode", "bm25")
    assert plain.stdout.startswith("[1] manual.pdf p. 2  (")

    again = hearth("docs", "add", str(docs_folder), "--collection", "home", env=env)
    assert "0 added, 0 changed, 0 removed, 7 unchanged" in again.stdout

    missing = hearth("docs", "search", "x", "-c", "nope")
    assert missing.returncode == 1 and missing.stderr.strip() == ("hearth: There is no collection called 'nope'; "
                                                                  "`hearth docs list` shows them.")
    from app.commands.doctor import _documents

    monkeypatch.setenv("HEARTH_EMBED_MODEL", str(embed_gguf))
    before = _documents()  # what `hearth doctor` shows
    assert before["index_bytes"] > 0 and before["embedding_model"] == str(embed_gguf)
    assert hearth("docs", "rm", "home").returncode == 0
    assert "No collections yet" in hearth("docs", "list").stdout
    assert _documents()["index_bytes"] < before["index_bytes"]


def test_search_without_an_embedding_model_says_bm25_serves_alone(docs_folder):
    hearth("docs", "add", str(docs_folder), "--collection", "home", "--no-vectors")
    found = hearth("docs", "search", "tomatoes need sun", env={"HEARTH_EMBED_MODEL": ""},)
    assert found.returncode == 0 and found.stdout.startswith("[1] readme.md § Gardening")
    # Whether the machine could make the model or not, the search itself never makes one and says BM25 serves.
    assert "BM25 keyword search serves alone" in found.stderr


def test_chat_with_a_collection_and_an_attachment_cites_its_chunks(docs_folder, embed_gguf, tmp_path):
    env = {"HEARTH_EMBED_MODEL": str(embed_gguf)}
    assert hearth("docs", "add", str(docs_folder), "--collection", "home", env=env).returncode == 0
    note = tmp_path / "party.txt"
    note.write_text("The garden party's budget is 450 euros.", encoding="utf-8")
    proc = hearth("chat", "--docs", "home", "--attach", str(note), "--attach", str(tmp_path / "gone.pdf"),
                  "--prompt", "Where is the reset button of the boiler?", "--temp", "0", "--max-tokens", "24",
                  "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "gone.pdf cannot be attached: No such file or directory. It was not attached." in proc.stderr
    assert "attached party.txt (" in proc.stderr and "in whole" in proc.stderr
    out = json.loads(proc.stdout)
    assert out["attachments"] == [{"name": "party.txt", "path": str(note.resolve()), "tokens": out["attachments"][0]["tokens"],
                                   "mode": "whole", "kind": "text"}]
    first = out["sources"][0]
    assert (first["n"], first["where"], first["collection"]) == (1, "manual.pdf p. 2", "home")
    assert isinstance(first["chunk_id"], int) and isinstance(first["cited"], bool)
    whole, _ = full_text(parse("manual.pdf", (docs_folder / "manual.pdf").read_bytes()))
    assert whole[first["start"]:first["end"]] == first["text"]
    assert out["prompt_tokens"] > 60  # the note and the passages reached the model
