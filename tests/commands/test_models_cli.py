"""`hearth models ...` run as a user runs it: a subprocess, its output and its exit code."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from tests.helpers.hfserver import FakeHub, FakeRepo
from tests.core.gguf.test_gguf_info import write_tiny_gguf
from tests.core.library.test_hub import blob


def hearth(*args, env=None, preexec_fn=None, timeout=120, stdin=subprocess.DEVNULL):
    proc = subprocess.run([sys.executable, "-m", "app", "models", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, preexec_fn=preexec_fn, stdin=stdin)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def one_sentence_error(proc, *fragments):
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    # Progress lines may come first; the error is one sentence on the last line.
    lines = proc.stderr.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("hearth: ")]
    assert errors == lines[-1:], proc.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


@pytest.fixture
def fake_hub(monkeypatch):
    server = FakeHub(repos={
        "acme/Tiny-GGUF": FakeRepo({"tiny-Q4_K_M.gguf": blob(400_000, 1), "tiny-Q8_0.gguf": blob(600_000, 2)},
                                   downloads=42, likes=5),
        "acme/Gated-GGUF": FakeRepo({"gated-Q4_K_M.gguf": blob(10_000, 3)}, gated=True),
        "acme/Broken-GGUF": FakeRepo({"broken-Q4_K_M.gguf": blob(10_000, 4)}, wrong_sha=True),
        "evil/Traversal-GGUF": FakeRepo({"../../escape-Q4_K_M.gguf": blob(1000, 5)}),
    }).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    yield server
    server.stop()


def test_list_and_inspect(hearth_home, bundled_model):
    lms = hearth_home / "discovery-home/.lmstudio/models/someone/Tiny"
    lms.mkdir(parents=True)
    write_tiny_gguf(lms / "tiny-F16.gguf")
    proc = hearth("list", "--json")
    assert proc.returncode == 0
    entries = {e["source"]: e for e in json.loads(proc.stdout)}
    assert entries["bundled"]["path"] == str(bundled_model) and entries["bundled"]["parameters"] > 130e6
    assert entries["lmstudio"]["name"] == "someone/Tiny/tiny-F16.gguf" and not entries["lmstudio"]["owned"]
    table = hearth("list").stdout
    assert "SmolLM2-135M-Instruct" in table and "lmstudio" in table and "Q4_1" in table

    info = json.loads(hearth("inspect", "bundled", "--json").stdout)
    assert (info["architecture"], info["layers"], info["kv_heads"], info["vocab_size"]) == ("llama", 30, 3, 49152)
    assert info["quant_by_kind"]["attn_q"] == {"Q4_1": 30} and info["seed_name"] == "INT4"
    text = hearth("inspect", str(bundled_model)).stdout
    assert "Quantization:   Q4_1 (INT4)" in text and "Context:        8192" in text


def test_bad_inputs_are_one_sentence(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\xff" * 40)
    one_sentence_error(hearth("inspect", str(junk)), "junk.gguf")
    one_sentence_error(hearth("inspect", "no-such-model"), "No model named 'no-such-model'")
    one_sentence_error(hearth("fit", str(tmp_path / "missing.gguf")), "No model named")
    one_sentence_error(hearth("rm", "bundled"), "cannot be removed")
    one_sentence_error(hearth("quantize", "bundled", "--type", "Q9_9"), "Unknown quantization type 'Q9_9'")
    one_sentence_error(hearth("import", str(tmp_path / "nothing.gguf")), "not found")


def test_fit(bundled_model):
    proc = hearth("fit", "bundled", "--ctx", "8192", "--kv-type", "q8_0", "--json")
    est = json.loads(proc.stdout)
    assert est["n_ctx"] == 8192 and est["fits"] and est["gpu_layers"] == 0
    assert est["kv_cache_mb"] == pytest.approx(30 * 8192 * 3 * 128 * 34 / 32 / 2**20, rel=0.01)
    text = hearth("fit", "bundled", "--ctx", "2048").stdout
    # In the decimal MB of the model list's file sizes (#29: MiB called MB beside decimal sizes read as a second unit)
    kv_bytes = 2048 * 30 * 3 * (64 + 64) * 2
    assert "Fits in RAM" in text and f"KV cache:       {kv_bytes / 1e6:,.0f} MB" in text


def test_fit_counts_a_draft_model(tmp_path, bundled_model):
    """#49.2: `hearth models fit --draft-model` counts the draft's weights and its own KV cache."""
    alone = json.loads(hearth("fit", "bundled", "--ctx", "32768", "--json").stdout)
    both = json.loads(hearth("fit", "bundled", "--ctx", "32768", "--draft-model", str(bundled_model), "--json").stdout)
    assert alone["draft_model"] is None and both["draft_model"] == str(bundled_model)
    assert both["draft_n_ctx"] == 8192  # the draft's trained context, not the target's 32,768
    assert both["total_mb"] == pytest.approx(alone["total_mb"] + both["draft_mb"], abs=0.2)
    assert both["draft_mb"] > alone["weights_mb"]  # its weights and an 8,192-token KV cache
    text = hearth("fit", "bundled", "--ctx", "32768", "--draft-model", str(bundled_model)).stdout
    assert "Draft model:" in text and "at 8,192 tokens of its own context" in text


def test_search_recommended_and_remote(fake_hub):
    text = hearth("search").stdout
    assert "Qwen2.5 7B Instruct" in text and "draft for speculative decoding: Qwen2.5 0.5B" in text
    repos = json.loads(hearth("search", "tiny", "--json").stdout)
    assert [r["repo_id"] for r in repos] == ["acme/Tiny-GGUF"]
    assert {f["quant"] for f in repos[0]["files"]} == {"Q4_K_M", "Q8_0"}
    text = hearth("search", "tiny").stdout
    assert "acme/Tiny-GGUF  (42 downloads, 5 likes)" in text and "Q8_0 (INT8)" in text


def test_pull_list_rm(fake_hub, hearth_home):
    proc = hearth("pull", "acme/Tiny-GGUF", "--quant", "Q8_0")
    assert proc.returncode == 0, proc.stderr
    assert "SHA-256 verified" in proc.stdout and "100% of 600.0 KB" in proc.stderr
    listed = json.loads(hearth("list", "--json").stdout)
    (mine,) = [e for e in listed if e["source"] == "hearth"]
    assert mine["name"] == "acme/Tiny-GGUF/tiny-Q8_0.gguf" and mine["size_bytes"] == 600_000
    proc = hearth("rm", "tiny-Q8_0", "--yes")
    assert proc.returncode == 0 and "Deleted" in proc.stdout
    assert not list((hearth_home / "data/models").rglob("*.gguf"))


def test_pull_failures(fake_hub, tmp_path):
    one_sentence_error(hearth("pull", "acme/Gated-GGUF"), "gated repository")
    assert hearth("pull", "acme/Gated-GGUF", "--token", fake_hub.token).returncode == 0
    one_sentence_error(hearth("pull", "acme/Nope-GGUF"), "acme/Nope-GGUF was not found")
    one_sentence_error(hearth("pull", "acme/Tiny-GGUF", "other.gguf"), "no GGUF file named 'other.gguf'")
    one_sentence_error(hearth("pull", "acme/Broken-GGUF"), "does not match the SHA-256")
    one_sentence_error(hearth("pull", "evil/Traversal-GGUF"), "outside the models folder")
    assert not list(tmp_path.parent.rglob("escape-Q4_K_M.gguf"))
    one_sentence_error(hearth("pull", "acme/Tiny-GGUF", env={"HF_ENDPOINT": "http://127.0.0.1:9"}),
                       "Cannot reach Hugging Face at http://127.0.0.1:9")


def test_disk_full_during_download(fake_hub, hearth_home):
    def small_disk():
        # Writes past 100 kB fail with EFBIG, the way a full disk fails them with ENOSPC.
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    proc = hearth("pull", "acme/Tiny-GGUF", preexec_fn=small_disk)
    one_sentence_error(proc, "The disk is full")
    part = hearth_home / "data/models/acme__Tiny-GGUF/tiny-Q4_K_M.gguf.part"
    kept = part.stat().st_size
    assert 0 < kept <= 100_000
    # With room again, the same command resumes from the partial file.
    assert hearth("pull", "acme/Tiny-GGUF").returncode == 0
    assert fake_hub.file_requests("tiny-Q4_K_M.gguf")[-1].range == f"bytes={kept}-"
    assert (part.parent / "tiny-Q4_K_M.gguf").read_bytes() == blob(400_000, 1)


def test_import_copy_and_rm(tmp_path):
    src = write_tiny_gguf(tmp_path / "mine-Q4_0.gguf")
    proc = hearth("import", str(src), "--copy", "--json")
    entry = json.loads(proc.stdout)
    assert entry["source"] == "imported" and entry["owned"] and src.exists()
    proc = hearth("rm", "mine-Q4_0", "-y")
    assert proc.returncode == 0 and not os.path.exists(entry["path"]) and src.exists()
    proc = hearth("import", str(src))
    assert "Linked" in proc.stdout
    proc = hearth("rm", "mine-Q4_0", "-y")
    assert "the file stays" in proc.stdout and src.exists()


@pytest.mark.slow
def test_quantize_then_list(hearth_home):
    proc = hearth("quantize", "bundled", "--type", "q8_0", "--allow-requantize")  # the bundled model is Q4_1
    assert proc.returncode == 0, proc.stderr
    assert "Q8_0 (INT8)" in proc.stdout
    listed = {e["name"]: e for e in json.loads(hearth("list", "--json").stdout)}
    assert listed["SmolLM2-135M-Instruct-Q8_0.gguf"]["quantization"] == "Q8_0"


def test_damaged_models_are_refused_by_their_content(tmp_path, bundled_model):
    """#18 item 12: a header alone does not make a model; inspect and import judge the tensor data too."""
    import gguf

    from tests.helpers.tiny_gguf import write_truncated_copy

    cut = write_truncated_copy(bundled_model, tmp_path / "cut.gguf", fraction=0.03)  # the first 3 MB
    header_only = tmp_path / "header-only.gguf"
    w = gguf.GGUFWriter(str(header_only), "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    claims = tmp_path / "claims-1tib.gguf"  # one tensor of 1 TiB declared, 400-odd bytes written
    w = gguf.GGUFWriter(str(claims), "llama")
    w.add_tensor_info("token_embd.weight", [2**19, 2**20], gguf.GGMLQuantizationType.F16.value, 2**40,
                      gguf.GGMLQuantizationType.F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    for path, fragment in ((cut, "is truncated or damaged"), (header_only, "has no tensors"),
                           (claims, "is truncated or damaged")):
        one_sentence_error(hearth("inspect", str(path)), path.name, fragment)
        one_sentence_error(hearth("import", str(path)), path.name, fragment)
    assert "cut" not in hearth("list").stdout


@pytest.mark.parametrize("mode", ["--copy", "--move"])
def test_a_model_not_named_gguf_is_imported_visibly_and_removably(tmp_path, mode):
    """#18 item 9: judged by content, kept under a name the library lists (and can remove)."""
    src = write_tiny_gguf(tmp_path / "mine-Q4_0.gguf").rename(tmp_path / "mine-Q4_0.bin")
    entry = json.loads(hearth("import", str(src), mode, "--json").stdout)
    assert entry["path"].endswith("mine-Q4_0.bin.gguf") and os.path.exists(entry["path"])
    assert any(e["path"] == entry["path"] for e in json.loads(hearth("list", "--json").stdout))
    assert hearth("rm", entry["path"], "--yes").returncode == 0 and not os.path.exists(entry["path"])


def test_rm_names_exactly_one_file_and_asks_first(tmp_path, hearth_home):
    """The case that deleted the wrong file: a linked x-q4_k_m.gguf beside Hearth's own x-Q4_K_M.gguf."""
    linked = write_tiny_gguf(tmp_path / "x-q4_k_m.gguf")
    assert hearth("import", str(linked)).returncode == 0
    own = write_tiny_gguf(hearth_home / "data/models/x-Q4_K_M.gguf")
    listed = json.loads(hearth("list", "--json").stdout)
    ids = {e["path"]: e["id"] for e in listed}
    assert len({v.casefold() for v in ids.values()}) == len(ids)  # one id per entry, unique even ignoring case
    table = hearth("list").stdout
    assert ids[str(linked)] in table and ids[str(own)] in table

    # Without --yes and without a terminal to ask on: what it would do, and nothing done.
    proc = hearth("rm", "x-q4_k_m.gguf")
    one_sentence_error(proc, str(linked), "the file stays", "--yes")
    assert linked.exists() and own.exists()

    # On a terminal it asks; "n" keeps everything.
    import pty

    master, slave = pty.openpty()
    os.write(master, b"n\n")
    proc = hearth("rm", "x-q4_k_m.gguf", stdin=slave)
    os.close(slave)
    os.close(master)
    assert proc.returncode == 1 and "Nothing was removed" in proc.stdout and "Go ahead?" in proc.stdout
    assert linked.exists() and own.exists()

    # The exact listed name of the link forgets the link: its file stays, the other file is untouched.
    proc = hearth("rm", "x-q4_k_m.gguf", "--yes")
    assert proc.returncode == 0 and "the file stays" in proc.stdout, proc.stderr
    assert linked.exists() and own.exists()
    # Now the name is Hearth's own file alone: deleting it says its path and size first.
    proc = hearth("rm", "x-Q4_K_M")
    one_sentence_error(proc, str(own), "will be deleted", " KB")
    assert hearth("rm", "x-Q4_K_M", "--yes").returncode == 0 and not own.exists() and linked.exists()


def test_an_ambiguous_name_is_refused_with_the_candidates(tmp_path, hearth_home):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    a = write_tiny_gguf(tmp_path / "a" / "same.gguf")
    b = write_tiny_gguf(tmp_path / "b" / "same.gguf")
    for path in (a, b):
        assert hearth("import", str(path)).returncode == 0
    ids = [e["id"] for e in json.loads(hearth("list", "--json").stdout) if e["name"] == "same.gguf"]
    assert len(ids) == 2 and ids[0] != ids[1] and all(i.startswith("same@") for i in ids)
    for command in (("rm", "same", "--yes"), ("inspect", "same.gguf"), ("fit", "SAME")):
        one_sentence_error(hearth(*command), "names 2 models", str(a), str(b))
    assert a.exists() and b.exists()
    proc = hearth("inspect", ids[1], "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["id"] == ids[1]
