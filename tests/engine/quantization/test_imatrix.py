"""`hearth models imatrix` (#33): llama-imatrix's sums collected through llama.cpp's eval callback, in its GGUF
format, on the bundled model and a slice of this project's README."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.core.gguf.imatrix import read_imatrix

ROOT = Path(__file__).resolve().parents[3]
CTX = 64
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def calibration(bundled_imatrix):
    return bundled_imatrix  # tests/conftest.py: made once, shared with the quantize and quality tests


def _tokens(model: Path, text: str) -> list[int]:
    import llama_cpp

    from app.protocol.messages import LoadOptions
    from app.engine.decoding.runtime import Runtime

    rt = Runtime(LoadOptions(model_path=str(model), n_ctx=CTX, n_batch=CTX, n_threads=1), extra_bufts=False)
    try:
        assert not rt.add_bos()  # SmolLM2 adds none: no chunk's first token is replaced
        return rt.tokenize(text, add_special=False, parse_special=False)
    finally:
        rt.close()
        del llama_cpp


def test_the_matrix_has_llama_imatrix_s_entries_counts_and_metadata(calibration, bundled_model):
    from app.core.gguf.info import read_gguf_info

    text, result, seen = calibration
    matrix = read_imatrix(result.path)
    n_chunks = len(_tokens(bundled_model, text.read_text(encoding="utf-8"))) // CTX
    assert n_chunks >= 2 and result.chunks == matrix.chunk_count == n_chunks and matrix.chunk_size == CTX
    assert seen == [(i, n_chunks) for i in range(1, n_chunks + 1)]  # the progress bar's steps, in order
    assert matrix.datasets == [str(text.resolve())] and matrix.model == bundled_model.name
    # Every weight matrix of every layer that multiplies activations (7 per layer), and nothing else: the
    # token embedding is a lookup, and the output (tied to it here) is not a blk.* weight.
    weights = {t.name: t for t in read_gguf_info(bundled_model).tensors
               if t.name.startswith("blk.") and len(t.shape) == 2}
    assert set(matrix.entries) == set(weights) and len(weights) == 7 * 30
    for name, entry in matrix.entries.items():
        assert entry.sums.shape == (1, weights[name].shape[0]), name  # one column per input
        assert entry.counts.tolist() == [n_chunks * CTX], name  # every token of every chunk, once
        assert (entry.sums > 0).all() and np.isfinite(entry.sums).all(), name
    # llama.cpp's own reader needs these keys (common/imatrix-loader.cpp: has_metadata)
    import gguf

    reader = gguf.GGUFReader(result.path)  # a matrix file is small; a model's vocabulary makes this reader slow
    assert reader.get_field("general.type").contents() == "imatrix"
    assert {"imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"} <= set(reader.fields)
    assert "general.architecture" not in reader.fields


def test_the_first_layer_s_sums_are_its_input_squared(calibration, bundled_model):
    """An independent check of what the tap read: layer 0's attention input is the token embeddings after RMS
    norm times attn_norm; numpy computes its squared sums from the file's own weights and the text's tokens."""
    import gguf

    from app.core.gguf.info import read_gguf_info

    text, result, _ = calibration
    matrix = read_imatrix(result.path)
    info = read_gguf_info(bundled_model)
    tensors = {t.name: t for t in info.tensors}
    embd, norm_t = tensors["token_embd.weight"], tensors["blk.0.attn_norm.weight"]
    assert embd.type == "Q8_0" and norm_t.type == "F32"
    row_bytes = embd.n_bytes // embd.shape[1]
    tokens = _tokens(bundled_model, text.read_text(encoding="utf-8"))[:result.chunks * CTX]
    with open(bundled_model, "rb") as fh:
        fh.seek(info.data_start + norm_t.offset)
        norm = np.frombuffer(fh.read(norm_t.n_bytes), dtype=np.float32).astype(np.float64)
        rows = []
        for token in tokens:  # the text's rows of the Q8_0 table, dequantized by gguf-py
            fh.seek(info.data_start + embd.offset + token * row_bytes)
            rows.append(np.frombuffer(fh.read(row_bytes), dtype=np.uint8))
    x = gguf.quants.dequantize(np.stack(rows), gguf.GGMLQuantizationType.Q8_0).reshape(len(tokens), 576)
    x = x.astype(np.float64)
    eps = float(info.metadata["llama.attention.layer_norm_rms_epsilon"])
    x = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * norm
    expected = (x * x).sum(axis=0)
    got = matrix.entries["blk.0.attn_q.weight"].sums[0]
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=1e-4)
    # Q, K and V take the same input, so their sums are the same numbers.
    assert np.array_equal(got, matrix.entries["blk.0.attn_k.weight"].sums[0])
    assert np.array_equal(got, matrix.entries["blk.0.attn_v.weight"].sums[0])


def _cli(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "models", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_bad_input_gets_one_sentence(tmp_path, bundled_model):
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n")
    short = tmp_path / "short.txt"
    short.write_text("Far too short to calibrate on.")
    cases = [
        (("imatrix", str(bundled_model), "--text", str(empty)), "is empty: there is nothing to calibrate on"),
        (("imatrix", str(bundled_model), "--text", str(tmp_path / "none.txt")), "does not exist"),
        (("imatrix", str(bundled_model), "--text", str(short), "--ctx", "64"),
         "an importance matrix needs at least one chunk of --ctx 64 tokens"),
        (("imatrix", str(bundled_model), "--chats"), "has no messages yet"),
    ]
    for args, sentence in cases:
        cli = _cli(*args)
        assert cli.returncode == 1 and "Traceback" not in cli.stderr, (args, cli.stderr)
        assert cli.stderr.strip().startswith("hearth: ") and sentence in cli.stderr, (args, cli.stderr)
        assert cli.stderr.strip().count("\n") == 0, cli.stderr  # one sentence, nothing else


def test_chats_calibrate_through_the_model_s_template(tmp_path, bundled_model, monkeypatch):
    from app.core.making.calibration_text import chat_documents
    from app.core.chats.store import ChatStore
    from app.engine.quantization.imatrix import document_tokens
    from app.protocol.messages import LoadOptions
    from app.engine.decoding.runtime import Runtime

    store = ChatStore(tmp_path / "chats.db")
    chat = store.create("Sky", system_prompt="Answer briefly.")
    store.add_message(chat, "user", "Why is the sky blue?")
    store.add_message(chat, "assistant", "Rayleigh scattering: short wavelengths scatter most.")
    store.create("Empty")  # a chat without messages is no text
    docs = chat_documents(store)
    assert [d["name"] for d in docs] == ["Sky"] and [m["role"] for m in docs[0]["messages"]] == \
        ["system", "user", "assistant"]
    rt = Runtime(LoadOptions(model_path=str(bundled_model), n_ctx=CTX, n_batch=CTX, n_threads=1), extra_bufts=False)
    try:
        tokens = document_tokens(rt, docs)
        im_start = rt.tokenize("<|im_start|>", add_special=False, parse_special=True)
    finally:
        rt.close()
    assert len(im_start) == 1 and tokens.count(im_start[0]) == 3  # one turn marker per message: the template's
