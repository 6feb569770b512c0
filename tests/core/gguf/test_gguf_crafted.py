"""Crafted GGUF headers (issue 48, B10): "valid" as written, they cost Hearth's reader 5-55 s and up to 2 GB, and
were then listed as models. Every header is now read within 2 s and 300 MB or refused in one sentence, by rules
that follow the file's size and are llama.cpp's own, so a file llama.cpp cannot open is never listed."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.errors import ModelFileError
from app.core.gguf.info import MAX_ARRAY_STRINGS, MAX_KV, MAX_TENSORS, read_gguf_info

ROOT = Path(__file__).resolve().parents[3]


def _s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


ARCH = _s(b"general.architecture") + struct.pack("<I", 8) + _s(b"llama")


def _header(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def _tensor(name: bytes, shape: tuple[int, ...], offset: int, ggml_type: int = 0) -> bytes:
    return _s(name) + struct.pack(f"<I{len(shape)}QIQ", len(shape), *shape, ggml_type, offset)


def empty_named_tensors(path: Path, n: int) -> Path:
    """n tensors with empty names, no dimensions, all at offset 0: 24 bytes each. Written sparse: zeros are
    exactly such entries, so the 238 MB file costs no disk."""
    path.write_bytes(_header(n, 1) + ARCH)
    with path.open("r+b") as fh:
        fh.truncate(len(_header(n, 1) + ARCH) + 24 * n + 64)
    return path


def array_keys(path: Path, n: int, items: int = 256, strings: bool = False) -> Path:
    """n keys, each an array of `items` one-byte values (or one-byte strings), and one small tensor."""
    value = struct.pack("<IIQ", 9, 8, items) + _s(b"a") * items if strings else \
        struct.pack("<IIQ", 9, 0, items) + b"\x01" * items
    with path.open("wb") as fh:
        fh.write(_header(1, n + 1) + ARCH)
        fh.write(b"".join(_s(b"k.%07d" % i) + value for i in range(n)))
        fh.write(_tensor(b"w", (8,), 0) + b"\0" * 64)
    return path


def good_tensors(path: Path, n: int) -> Path:
    """n well-formed one-value F32 tensors, each where the one before ends (padded to 32): llama.cpp's layout."""
    head = _header(n, 1) + ARCH + b"".join(_tensor(b"t.%06d" % i, (1,), 32 * i) for i in range(n))
    path.write_bytes(head + b"\0" * (-len(head) % 32 + 32 * n))
    return path


def measured(path: Path) -> dict:
    """read_gguf_info in a fresh interpreter: its seconds (CPU seconds too: the test machine's two cores are
    shared, and the reader's own cost is what is bounded), its peak RSS (its own high-water mark: ru_maxrss survives
    fork+exec and would carry the test session's), and what it said."""
    code = f"""
import json, time
from app.core.errors import ModelFileError
from app.core.metrics import peak_rss_mb
from app.core.gguf.info import read_gguf_info
t0, c0 = time.monotonic(), time.process_time()
try:
    info = read_gguf_info({str(path)!r}); said = None
except ModelFileError as exc:
    said = str(exc)
print(json.dumps({{"s": time.monotonic() - t0, "cpu_s": time.process_time() - c0, "said": said,
                  "peak_mb": peak_rss_mb()}}))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case, make, says", [
    ("1,000,000 tensors with empty names (24 MB)", lambda p: empty_named_tensors(p, 1_000_000),
     "claims 1,000,000 tensors, far more than any model has"),
    ("9,900,000 tensors (238 MB)", lambda p: empty_named_tensors(p, 9_900_000),
     "claims 9,900,000 tensors, far more than any model has"),
    ("200,000 keys, each a 256-item array (58 MB)", lambda p: array_keys(p, 200_000),
     "claims 200,001 metadata entries, far more than any model has"),
])
def test_the_issues_crafted_headers_are_refused_in_seconds_and_little_memory(tmp_path, case, make, says):
    path = make(tmp_path / "crafted.gguf")
    out = measured(path)
    assert out["said"] is not None and says in out["said"] and out["said"].startswith("crafted.gguf "), case
    assert out["cpu_s"] < 2 and out["s"] < 10 and out["peak_mb"] < 300, (case, out)


@pytest.mark.parametrize("case, make", [
    ("as many tensors as allowed", lambda p: good_tensors(p, MAX_TENSORS)),
    ("as many keys as allowed, each a 256-item array", lambda p: array_keys(p, MAX_KV - 1)),
    ("as many keys as allowed, each 240 strings", lambda p: array_keys(p, MAX_KV - 1, 240, strings=True)),
])
def test_headers_at_every_cap_read_within_2_s_and_300_mb(tmp_path, case, make):
    out = measured(make(tmp_path / "big.gguf"))
    assert out["cpu_s"] < 2 and out["s"] < 10 and out["peak_mb"] < 300, (case, out)


def test_the_largest_allowed_header_keeps_arrays_as_counts(tmp_path):
    info = read_gguf_info(array_keys(tmp_path / "keys.gguf", 2_000))
    kept = [v for k, v in info.metadata.items() if k.startswith("k.") and isinstance(v, list)]
    # The first 256 arrays fit the budget of kept items, and come back whole; the rest are counted.
    assert len(kept) == 256 and kept[0] == [1] * 256
    assert info.metadata["k.0001999"] == "<array of 256 uint8>"


@pytest.mark.parametrize("tensors, says", [
    ([_tensor(b"a", (8,), 0), _tensor(b"a", (8,), 32)], "has two tensors named 'a', which llama.cpp refuses"),
    ([_tensor(b"", (8,), 0), _tensor(b"", (8,), 32)], "has two tensors named '', which llama.cpp refuses"),
    ([_tensor(b"x" * 64, (8,), 0)], "has a tensor name longer than 63 bytes"),
    # Every tensor at offset 0, as in the crafted file: llama.cpp wants each where the one before it ends.
    ([_tensor(b"a", (8,), 0), _tensor(b"b", (8,), 0)], "tensor 'b' starts at 0 in the data section where llama.cpp "
                                                       "expects 32"),
    ([_tensor(b"a", (1, 1, 1, 1, 1), 0)], "has a tensor with 5 dimensions"),
    ([_tensor(b"q", (33,), 0, ggml_type=2)], "rows of 33 values, not a whole number of Q4_0 blocks"),
])
def test_llama_cpps_rules_for_the_tensor_table(tmp_path, tensors, says):
    head = _header(len(tensors), 1) + ARCH + b"".join(tensors)
    path = tmp_path / "bad.gguf"
    path.write_bytes(head + b"\0" * 4096)
    with pytest.raises(ModelFileError, match=says.replace("(", r"\(")):
        read_gguf_info(path)


def test_keys_must_be_named_once(tmp_path):
    for keys, says in (([ARCH, ARCH], "has the key 'general.architecture' twice"), ([ARCH, _s(b"") + struct.pack(
            "<IB", 0, 1)], "has an empty key")):
        path = tmp_path / "keys.gguf"
        path.write_bytes(_header(1, len(keys)) + b"".join(keys) + _tensor(b"w", (8,), 0) + b"\0" * 128)
        with pytest.raises(ModelFileError, match=says):
            read_gguf_info(path)


def test_strings_over_all_arrays_are_capped(tmp_path):
    path = tmp_path / "strings.gguf"
    with path.open("wb") as fh:
        fh.write(_header(1, 2) + ARCH + _s(b"tokenizer.ggml.tokens"))
        fh.write(struct.pack("<IIQ", 9, 8, MAX_ARRAY_STRINGS + 1) + _s(b"a") * (MAX_ARRAY_STRINGS + 1))
        fh.write(_tensor(b"w", (8,), 0) + b"\0" * 64)
    with pytest.raises(ModelFileError, match="more than 4,000,000 strings in its metadata arrays"):
        read_gguf_info(path)


def test_a_crafted_file_is_never_listed_as_a_working_model(tmp_path):
    """In Hearth's models folder, `models list` shows it as unreadable, with the reason, not as a model."""
    import os

    home = tmp_path / "home"
    folder = home / "data" / "models"
    folder.mkdir(parents=True)
    empty_named_tensors(folder / "crafted.gguf", 1_000_000)
    run = subprocess.run([sys.executable, "-m", "app", "models", "list", "--no-discover", "--json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "HEARTH_HOME": str(home)})
    assert run.returncode == 0, run.stderr
    (entry,) = [e for e in json.loads(run.stdout) if e["name"] == "crafted.gguf"]
    assert entry["error"].startswith("crafted.gguf claims 1,000,000 tensors") and entry["architecture"] is None


def _chunk_edges(count: int) -> list[int]:
    """Where skip_strings' buffer ends, from the start of the array's strings: its first read, then each one
    twice the last (app/core/gguf/info.py)."""
    from app.core.gguf.info import _SKIP_CHUNK, _SKIP_FIRST

    edges, chunk, end = [], _SKIP_FIRST, 0
    for _ in range(count):
        end += chunk
        edges.append(end)
        chunk = min(2 * chunk, _SKIP_CHUNK)
    return edges


def vocab_with_empty_token(path: Path, ends_at: int) -> Path:
    """A vocabulary (skipped, not kept: more than 256 tokens) whose second token is empty and whose length field
    ends `ends_at` bytes after the first token's starts."""
    filler = b"f" * (ends_at - 16)
    tokens = [filler, b""] + [b"a"] * 300
    with path.open("wb") as fh:
        fh.write(_header(1, 2) + ARCH + _s(b"tokenizer.ggml.tokens"))
        fh.write(struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(_s(t) for t in tokens))
        fh.write(_tensor(b"w", (8,), 0) + b"\0" * 64)
    return path


def test_an_empty_token_at_any_chunk_edge_is_read(tmp_path):
    """#56 D15: an empty token whose length ended exactly at the first 4 KiB chunk's end read one byte past the
    buffer (IndexError: `models list` rc 2, GET /v1/models 500). Every edge of the first five chunks, and every
    offset around each, reads."""
    for edge in _chunk_edges(5):
        for ends_at in range(edge - 24, edge + 25):
            info = read_gguf_info(vocab_with_empty_token(tmp_path / "vocab.gguf", ends_at))
            assert info.metadata["tokenizer.ggml.tokens"] == "<array of 302 string>", ends_at
            assert info.vocab_markers == [], ends_at


def test_a_vocabulary_with_an_empty_token_at_a_chunk_edge_is_listed(tmp_path):
    """In LM Studio's folder, as the issue found it: `models list` lists it (rc 0), not an internal error."""
    import os

    home = tmp_path / "home"
    found = tmp_path / "found" / ".lmstudio" / "models" / "someone" / "repo"
    found.mkdir(parents=True)
    vocab_with_empty_token(found / "edge.gguf", _chunk_edges(1)[0])
    run = subprocess.run([sys.executable, "-m", "app", "models", "list", "--json"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={**os.environ, "HEARTH_HOME": str(home),
                                                     "HEARTH_DISCOVERY_HOME": str(tmp_path / "found")})
    assert run.returncode == 0, run.stderr
    (entry,) = [e for e in json.loads(run.stdout) if e["source"] == "lmstudio"]
    assert entry["name"] == "someone/repo/edge.gguf" and entry["architecture"] == "llama" and entry["error"] is None
