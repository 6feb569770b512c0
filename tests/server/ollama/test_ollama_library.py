"""Ollama's /api/pull and /api/delete on a real `hearth serve`, with the official `ollama` client (#54.3): a pull
of a Hugging Face name goes through Hearth's own downloader from a real local server with the Hub's URL layout
(tests/helpers/hfserver.py), and the model is in /api/tags at once; a delete removes what Hearth downloaded."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.core.gguf.test_gguf_info import write_tiny_gguf
from tests.helpers.hfserver import FakeHub, FakeRepo
from tests.server.conftest import start_server, stop_server

ollama = pytest.importorskip("ollama")


def tiny_gguf(tmp_path: Path, name: str) -> bytes:
    path = tmp_path / name
    write_tiny_gguf(path, name=name)
    return path.read_bytes()


@pytest.fixture(scope="module")
def hub_and_server(tmp_path_factory):
    made = tmp_path_factory.mktemp("ggufs")
    hub = FakeHub(repos={"acme/Tiny-GGUF": FakeRepo({"tiny-Q4_K_M.gguf": tiny_gguf(made, "a.gguf"),
                                                     "tiny-Q8_0.gguf": tiny_gguf(made, "b.gguf")})}).start()
    home = tmp_path_factory.mktemp("ollama_pull_home")
    proc, base = start_server(env={"HEARTH_HOME": str(home), "HF_ENDPOINT": hub.url,
                                   "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "HF_TOKEN": ""})
    yield hub, base.removesuffix("/v1"), home
    assert stop_server(proc)
    hub.stop()


def test_a_hugging_face_name_is_pulled_with_ollamas_progress_and_listed_at_once(hub_and_server):
    hub, root, home = hub_and_server
    client = ollama.Client(host=root, timeout=120)
    lines = list(client.pull("hf.co/acme/Tiny-GGUF:Q8_0", stream=True))
    statuses = [line.status for line in lines]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success", statuses
    assert "verifying sha256 digest" in statuses  # the Hub published its SHA-256, and it matched
    last = [line for line in lines if line.total][-1]
    assert last.completed == last.total == len(hub.repos["acme/Tiny-GGUF"].files["tiny-Q8_0.gguf"])
    pulled = list(home.rglob("tiny-Q8_0.gguf"))
    assert len(pulled) == 1 and not list(home.rglob("tiny-Q4_K_M.gguf"))  # the quant named, only
    names = [m.model for m in client.list().models]
    assert any("tiny-Q8_0" in name for name in names), names

    # stream false: one object; the default choice where no quant is named (Q4_K_M here).
    r = httpx.post(root + "/api/pull", json={"model": "hf.co/acme/Tiny-GGUF", "stream": False}, timeout=120)
    assert r.status_code == 200 and r.json() == {"status": "success"}, r.text
    assert list(home.rglob("tiny-Q4_K_M.gguf"))

    # delete: Hearth's own download is deleted from the disk and the list.
    name = next(n for n in (m.model for m in client.list().models) if "tiny-Q8_0" in n)
    client.delete(name)
    assert not pulled[0].exists()
    assert not any("tiny-Q8_0" in m.model for m in client.list().models)


def test_names_hearth_cannot_pull_or_delete_are_one_sentence_in_ollamas_shape(hub_and_server):
    _, root, _ = hub_and_server
    client = ollama.Client(host=root, timeout=60)
    with pytest.raises(ollama.ResponseError) as raised:
        list(client.pull("llama3.2", stream=True))
    assert raised.value.status_code == 400 and "hf.co/OWNER/REPO:QUANT" in raised.value.error
    r = httpx.post(root + "/api/pull", json={"model": "hf.co/acme/No-Such-GGUF:Q4_K_M", "stream": False}, timeout=60)
    assert r.status_code == 404 and isinstance(r.json()["error"], str), r.text
    with pytest.raises(ollama.ResponseError) as raised:
        client.delete("no-such-model:latest")
    assert raised.value.status_code == 404
    bundled = next(m.model for m in client.list().models if m.model.startswith("SmolLM2"))
    with pytest.raises(ollama.ResponseError) as raised:
        client.delete(bundled)
    assert raised.value.status_code == 400 and "part of Hearth" in raised.value.error
