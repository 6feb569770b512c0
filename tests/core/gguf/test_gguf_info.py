"""GGUF inspection on generated files, the bundled model, and hostile headers."""

from __future__ import annotations

import struct
import time

import gguf
import numpy as np
import pytest

from app.core.errors import ModelFileError
from app.core.gguf.info import read_gguf_info
from app.core.gguf.names import quant_from_filename


def write_tiny_gguf(path, *, arch="llama", layers=2, heads=4, kv_heads=2, embd=32, vocab=300, ctx=1024,
                    qtype=gguf.GGMLQuantizationType.F16, name="Tiny Test", template="{{ messages }}"):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_license("mit")
    w.add_block_count(layers)
    w.add_context_length(ctx)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(embd * 2)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_chat_template(template)
    dtype = np.float16 if qtype == gguf.GGMLQuantizationType.F16 else np.float32
    w.add_tensor("token_embd.weight", np.zeros((vocab, embd), dtype=dtype))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((embd, embd), dtype=dtype))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.zeros((embd,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_generated_file_reports_every_field(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    info = read_gguf_info(path)
    assert (info.architecture, info.name, info.license) == ("llama", "Tiny Test", "mit")
    assert (info.layers, info.heads, info.kv_heads, info.embedding_size) == (2, 4, 2, 32)
    assert (info.head_size_k, info.vocab_size, info.tokenizer, info.context_length) == (8, 300, "gpt2", 1024)
    assert info.chat_template == "{{ messages }}"
    assert info.parameters == 300 * 32 + 2 * (32 * 32 + 32)
    assert info.quant_by_kind == {"token_embd": {"F16": 1}, "attn_q": {"F16": 2}, "attn_norm": {"F32": 2}}
    assert info.file_type == "F16"  # no general.file_type: the type holding most weight bytes
    # The token list is counted, not kept.
    assert info.metadata["tokenizer.ggml.tokens"] == "<array of 300 string>"


def test_bundled_model(bundled_model):
    info = read_gguf_info(bundled_model)
    assert info.architecture == "llama"
    assert 130e6 < info.parameters < 140e6
    assert (info.layers, info.heads, info.kv_heads, info.embedding_size, info.vocab_size) == (30, 9, 3, 576, 49152)
    assert info.file_type == "Q4_1" and info.seed_name == "INT4"
    assert info.quant_by_kind["attn_q"] == {"Q4_1": 30}
    assert info.context_length == 8192 and "im_start" in info.chat_template
    assert info.license == "apache-2.0"


@pytest.mark.parametrize("kind", ["F16", "Q8_0", "Q4_K_M"])
def test_quantized_variants_report_their_type(model_variant, kind):
    info = read_gguf_info(model_variant(kind))
    assert info.file_type == kind
    assert 130e6 < info.parameters < 140e6


def _header(version=3, n_tensors=0, n_kv=1):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def _kv_string_key(key: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key


HOSTILE = {
    "empty": (b"", "empty"),
    "not gguf": (b"PK\x03\x04" + b"\0" * 100, "not a GGUF model file"),
    "short text": (b"hi", "not a GGUF model file"),
    "wrong version": (_header(version=4), "uses GGUF version 4, which Hearth cannot read"),
    # Text where the version belongs ("GGUF\x1c\x1c\x00-" as bytes): damage, not a newer format (#17).
    "damaged version": (_header(version=771804700), "is a damaged file: its GGUF header is broken"),
    "truncated header": (b"GGUF\x03\x00", "truncated"),
    "huge kv count": (_header(n_kv=2**62), "metadata entries"),
    "huge tensor count": (_header(n_tensors=2**40, n_kv=0), "tensors"),
    "huge key length": (_header() + struct.pack("<Q", 2**62) + b"\0" * 64, "bytes in one string"),
    "huge string value": (_header() + _kv_string_key(b"general.name") + struct.pack("<IQ", 8, 2**40),
                          "bytes in one string"),
    "huge array": (_header() + _kv_string_key(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2**61),
                   "array items"),
    "unknown value type": (_header() + _kv_string_key(b"x") + struct.pack("<I", 77) + b"\0" * 8, "unknown GGUF type"),
    "truncated inside value": (_header() + _kv_string_key(b"general.name") + struct.pack("<IQ", 8, 50) + b"abc",
                               "truncated"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_headers_give_one_sentence_quickly(tmp_path, case):
    data, expected = HOSTILE[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    started = time.monotonic()
    with pytest.raises(ModelFileError, match=expected) as err:
        read_gguf_info(path)
    assert time.monotonic() - started < 1.0
    assert "\n" not in str(err.value) and "bad.gguf" in str(err.value)


def test_many_small_strings_claimed_beyond_file_end_are_refused(tmp_path):
    # A claimed array of 10 million strings in a 100-byte file must not loop 10 million times.
    data = _header() + _kv_string_key(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 10_000_000)
    path = tmp_path / "bad.gguf"
    path.write_bytes(data + b"\0" * 64)
    with pytest.raises(ModelFileError, match="array items"):
        read_gguf_info(path)


def test_truncated_real_model_header(tmp_path, bundled_model):
    path = tmp_path / "cut.gguf"
    with open(bundled_model, "rb") as fh:
        path.write_bytes(fh.read(100_000))
    with pytest.raises(ModelFileError, match="truncated"):
        read_gguf_info(path)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        read_gguf_info(tmp_path / "nope.gguf")
    with pytest.raises(ModelFileError, match="folder"):
        read_gguf_info(tmp_path)


@pytest.mark.parametrize("name, quant", [
    ("qwen2.5-7b-instruct-q4_k_m.gguf", "Q4_K_M"), ("Meta-Llama-3-8B.Q8_0.gguf", "Q8_0"),
    ("model-f16-00001-of-00003.gguf", "F16"), ("x-IQ4_XS.gguf", "IQ4_XS"), ("mistral-7b.gguf", None),
    ("Q5_K_M/model-Q5_K_M-00002-of-00002.gguf", "Q5_K_M"), ("phi-3-mini-4k-instruct-fp16.gguf", "F16"),
])
def test_quant_type_from_file_name(name, quant):
    assert quant_from_filename(name) == quant
