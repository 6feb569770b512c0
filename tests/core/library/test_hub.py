"""Search and download with the real huggingface_hub client against a local Hub-shaped server."""

from __future__ import annotations

import hashlib
import os
import socket
import threading

import pytest

from app.core.library import hub
from tests.helpers.hfserver import FakeHub, FakeRepo


def blob(n: int, seed: int) -> bytes:
    return hashlib.sha256(str(seed).encode()).digest() * (n // 32) + b"GGUF"[: n % 32]


@pytest.fixture
def fake_hub():
    server = FakeHub(repos={
        "acme/Tiny-GGUF": FakeRepo({"tiny-Q4_K_M.gguf": blob(300_000, 1), "tiny-Q8_0.gguf": blob(500_000, 2),
                                    "README.md": b"# tiny\n"}, downloads=500, likes=7),
        "acme/TinyChat-GGUF": FakeRepo({"tinychat.Q4_0.gguf": blob(200_000, 3)}, downloads=900, likes=3),
        "acme/Split-GGUF": FakeRepo({f"big-Q4_K_M-0000{i}-of-00003.gguf": blob(100_000 + i, 10 + i)
                                     for i in (1, 2, 3)}, downloads=10),
        "acme/Gated-GGUF": FakeRepo({"gated-Q4_K_M.gguf": blob(50_000, 4)}, gated=True),
        "acme/Broken-GGUF": FakeRepo({"broken-Q4_K_M.gguf": blob(80_000, 5)}, wrong_sha=True),
        "evil/Traversal-GGUF": FakeRepo({"../escape-Q4_K_M.gguf": blob(1000, 6),
                                         "sub/../../escape2-Q4_0.gguf": blob(1000, 7)}),
    }).start()
    yield server
    server.stop()


def test_search_lists_gguf_files_with_size_and_quant(fake_hub):
    repos = hub.search("tiny", endpoint=fake_hub.url)
    assert [r.repo_id for r in repos] == ["acme/TinyChat-GGUF", "acme/Tiny-GGUF"]  # most downloaded first
    tiny = repos[1]
    assert (tiny.downloads, tiny.likes) == (500, 7)
    files = {f.filename: f for f in tiny.files}
    assert set(files) == {"tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf"}  # README is not a model
    assert files["tiny-Q8_0.gguf"].size == 500_000 and files["tiny-Q8_0.gguf"].quant == "Q8_0"
    assert files["tiny-Q4_K_M.gguf"].sha256 == hashlib.sha256(blob(300_000, 1)).hexdigest()


def test_pull_default_quant_with_progress_and_verification(fake_hub, hearth_home):
    calls = []
    result = hub.pull("acme/Tiny-GGUF", endpoint=fake_hub.url, progress=lambda d, t: calls.append((d, t)))
    (path,) = result.paths
    assert path.name == "tiny-Q4_K_M.gguf" and path.read_bytes() == blob(300_000, 1)
    assert path.is_relative_to(hearth_home) and result.verified and result.bytes_downloaded == 300_000
    assert calls[-1] == (300_000, 300_000)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert not list(path.parent.glob("*.part*"))
    # A second pull finds the verified file and fetches nothing.
    assert hub.pull("acme/Tiny-GGUF", endpoint=fake_hub.url).bytes_downloaded == 0


def test_pull_by_quant_and_by_name(fake_hub):
    assert hub.pull("acme/Tiny-GGUF", quant="q8_0", endpoint=fake_hub.url).paths[0].name == "tiny-Q8_0.gguf"
    with pytest.raises(hub.NotFoundError, match="no Q6_K GGUF file .it has Q4_K_M, Q8_0"):
        hub.pull("acme/Tiny-GGUF", quant="Q6_K", endpoint=fake_hub.url)
    with pytest.raises(hub.NotFoundError, match="no GGUF file named 'nope.gguf'"):
        hub.pull("acme/Tiny-GGUF", "nope.gguf", endpoint=fake_hub.url)


def test_split_gguf_is_fetched_as_a_set(fake_hub):
    result = hub.pull("acme/Split-GGUF", "big-Q4_K_M-00002-of-00003.gguf", endpoint=fake_hub.url)
    assert [p.name for p in result.paths] == [f"big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert all(p.read_bytes() == blob(100_000 + i, 10 + i) for i, p in enumerate(result.paths, 1))


def test_dropped_connection_resumes_with_range(fake_hub):
    fake_hub.drop_after["tiny-Q8_0.gguf"] = 123_456
    result = hub.pull("acme/Tiny-GGUF", quant="Q8_0", endpoint=fake_hub.url)
    assert result.paths[0].read_bytes() == blob(500_000, 2)
    gets = [r for r in fake_hub.file_requests("tiny-Q8_0.gguf") if r.method == "GET"]
    assert [g.range for g in gets] == [None, "bytes=123456-"]


def test_cancelled_download_resumes_in_a_later_call(fake_hub):
    class CancelAfterFirstChunk(threading.Event):
        # The GUI sets the event from another thread; here it turns on once the first chunk was written.
        def is_set(self):
            part = hub.repo_folder("acme/Tiny-GGUF") / "tiny-Q8_0.gguf.part"
            return part.exists() and part.stat().st_size > 0

    with pytest.raises(hub.DownloadCancelled, match="resumes"):
        hub.pull("acme/Tiny-GGUF", quant="Q8_0", endpoint=fake_hub.url, cancel=CancelAfterFirstChunk())
    part = hub.repo_folder("acme/Tiny-GGUF") / "tiny-Q8_0.gguf.part"
    kept = part.stat().st_size
    assert 0 < kept < 500_000
    result = hub.pull("acme/Tiny-GGUF", quant="Q8_0", endpoint=fake_hub.url)
    assert result.paths[0].read_bytes() == blob(500_000, 2)
    assert result.bytes_downloaded == 500_000 - kept
    assert fake_hub.file_requests("tiny-Q8_0.gguf")[-1].range == f"bytes={kept}-"


def test_wrong_checksum_is_refused_and_deleted(fake_hub):
    with pytest.raises(hub.ChecksumError, match="does not match the SHA-256"):
        hub.pull("acme/Broken-GGUF", endpoint=fake_hub.url)
    # Nothing is left behind, not even the empty folder it was going into (#18 item 16).
    assert not hub.repo_folder("acme/Broken-GGUF").exists()


def test_gated_repo_needs_a_token(fake_hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    with pytest.raises(hub.GatedError, match="gated repository.*token"):
        hub.pull("acme/Gated-GGUF", endpoint=fake_hub.url)
    with pytest.raises(hub.GatedError):
        hub.pull("acme/Gated-GGUF", endpoint=fake_hub.url, token="hf_wrong")
    result = hub.pull("acme/Gated-GGUF", endpoint=fake_hub.url, token=fake_hub.token)
    assert result.paths[0].read_bytes() == blob(50_000, 4)
    assert fake_hub.file_requests("gated-Q4_K_M.gguf")[-1].authorization == f"Bearer {fake_hub.token}"


def test_missing_repo(fake_hub):
    with pytest.raises(hub.NotFoundError, match="acme/Nope-GGUF was not found"):
        hub.pull("acme/Nope-GGUF", endpoint=fake_hub.url)
    with pytest.raises(hub.NotFoundError, match="not a valid repository name"):
        hub.pull("../../etc", endpoint=fake_hub.url)


def test_server_not_there():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(hub.NetworkError, match=f"Cannot reach Hugging Face at http://127.0.0.1:{port}"):
        hub.search("tiny", endpoint=f"http://127.0.0.1:{port}")
    with pytest.raises(hub.NetworkError):
        hub.pull("acme/Tiny-GGUF", endpoint=f"http://127.0.0.1:{port}")


@pytest.mark.parametrize("name", ["../escape-Q4_K_M.gguf", "sub/../../escape2-Q4_0.gguf"])
def test_file_names_never_escape_the_models_folder(fake_hub, hearth_home, name):
    with pytest.raises(hub.UnsafeFileName, match="outside the models folder"):
        hub.pull("evil/Traversal-GGUF", name, endpoint=fake_hub.url)
    assert not list(hearth_home.rglob("escape*"))
    assert not [r for r in fake_hub.requests if "/resolve/" in r.path]


@pytest.mark.parametrize("name", ["/etc/passwd", "C:/x.gguf", "a\\..\\..\\b.gguf", ""])
def test_safe_destination_refuses_odd_names(tmp_path, name):
    with pytest.raises(hub.UnsafeFileName):
        hub.safe_destination(tmp_path, name)
    assert hub.safe_destination(tmp_path, "Q4/model.gguf") == tmp_path.resolve() / "Q4" / "model.gguf"


def test_download_files_fetches_any_file_type(fake_hub, tmp_path):
    got = hub.download_files("acme/Tiny-GGUF", ["README.md", "tiny-Q4_K_M.gguf"], tmp_path / "dl",
                             endpoint=fake_hub.url)
    assert [p.name for p in got] == ["README.md", "tiny-Q4_K_M.gguf"]
    assert got[0].read_bytes() == b"# tiny\n"


def test_recommended_models_list():
    models = hub.recommended_models()
    assert len(models) >= 5
    for m in models:
        assert {"name", "repo", "file", "size_gb", "good_at"} <= set(m)
        assert "/" in m["repo"] and m["file"].endswith(".gguf")
    assert any(m.get("draft") for m in models)
