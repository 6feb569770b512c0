"""Small GGUF files written with the gguf package, for tests of bad or unusual models."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_unknown_arch(path: Path, arch: str = "hearthtestarch") -> Path:
    """A well-formed GGUF whose architecture llama.cpp does not know."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("unknown-arch test model")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_truncated_copy(source: Path, dest: Path, fraction: float = 0.3) -> Path:
    """The first part of a real GGUF: a valid header whose tensor data runs past the end."""
    size = source.stat().st_size
    with source.open("rb") as src, dest.open("wb") as out:
        out.write(src.read(int(size * fraction)))
    return dest


def write_oversized(path: Path, gib: int = 64) -> Path:
    """A llama GGUF whose one F16 tensor is `gib` GiB: a sparse file (no disk used) far larger than this
    machine's RAM, so the fit check refuses it. Never load it with the check off: the data is zeros."""
    import gguf

    rows = gib * 2**30 // (4096 * 2)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("oversized test model")
    writer.add_block_count(1)
    writer.add_context_length(4096)
    writer.add_embedding_length(4096)
    writer.add_head_count(32)
    writer.add_head_count_kv(8)
    writer.add_feed_forward_length(11008)
    writer.add_tensor_info("token_embd.weight", (rows, 4096), np.float16, rows * 4096 * 2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    # The data starts at the next multiple of the alignment (32) after the header; the data itself is a hole.
    header = path.stat().st_size
    with path.open("r+b") as fh:
        fh.truncate(-(-header // 32) * 32 + rows * 4096 * 2)
    return path


def write_tiny_bert(path: Path, n_embd: int = 32, n_layer: int = 2, n_ff: int = 64, n_ctx: int = 128) -> Path:
    """A random-weight BERT sentence-embedding model (llama.cpp's `bert` architecture, mean pooling, a WordPiece
    vocabulary): a model that embeds and cannot write text."""
    import gguf

    rng = np.random.default_rng(0)
    words = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"[unused{i}]" for i in range(30)]
             + list("abcdefghijklmnopqrstuvwxyz") + ["the", "is", "sea", "hello", "world", "##s", "."])
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_name("tiny-bert sentence embeddings")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(2)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_tokenizer_model("bert")
    w.add_token_type_count(2)
    w.add_token_list(words)
    w.add_token_types([gguf.TokenType.CONTROL if t.startswith("[") else gguf.TokenType.NORMAL for t in words])
    w.add_unk_token_id(1)
    w.add_pad_token_id(0)
    w.add_bos_token_id(2)  # [CLS]: llama.cpp reads BERT's CLS as its BOS
    w.add_eos_token_id(3)
    w.add_sep_token_id(3)
    w.add_mask_token_id(4)

    def tensor(name: str, *shape: int, scale: float = 0.2) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def norm(name: str) -> None:
        w.add_tensor(name + ".weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(name + ".bias", np.zeros(n_embd, dtype=np.float32))

    tensor("token_embd.weight", len(words), n_embd)
    tensor("token_types.weight", 2, n_embd)
    tensor("position_embd.weight", n_ctx, n_embd)
    norm("token_embd_norm")
    for i in range(n_layer):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{i}.{part}.weight", n_embd, n_embd)
            tensor(f"blk.{i}.{part}.bias", n_embd)
        norm(f"blk.{i}.attn_output_norm")
        tensor(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        tensor(f"blk.{i}.ffn_up.bias", n_ff)
        tensor(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
        tensor(f"blk.{i}.ffn_down.bias", n_embd)
        norm(f"blk.{i}.layer_output_norm")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _shaped_writer(path: Path, arch: str, name: str, n_ctx_train: int, n_embd: int, n_layer: int, n_ff: int,
                   n_head: int, n_head_kv: int):
    """A GGUFWriter with a transformer's shape keys set."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    return w


def _finish(w, path: Path) -> Path:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_random_gemma3(path: Path, n_vocab: int = 262_144, n_embd: int = 128, n_layer: int = 6, n_ff: int = 512,
                        n_head: int = 4, n_head_kv: int = 1, head_dim: int = 64, n_ctx_train: int = 32_768,
                        sliding_window: int = 512) -> Path:
    """A random-weight model of Gemma 3's shape (llama.cpp's `gemma3`: sliding-window attention on five layers of
    six, q/k norms, a 262k SentencePiece vocabulary with Gemma's turn markers, no chat template): another family
    than the bundled model, for the chat-format choice and the memory estimate. F16 weights, about 70 MB."""
    import gguf

    rng = np.random.default_rng(3)
    w = _shaped_writer(path, "gemma3", "random gemma3-shaped test model", n_ctx_train, n_embd, n_layer, n_ff, n_head,
                       n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1_000_000.0)
    w.add_sliding_window(sliding_window)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    special = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    pieces = [f"\u2581w{i}" for i in range(n_vocab - len(special) - len(byte_tokens))]
    w.add_tokenizer_model("llama")
    w.add_token_list(special + byte_tokens + pieces)
    w.add_token_scores([0.0] * len(special) + [0.0] * 256 + [-float(i) for i in range(len(pieces))])
    w.add_token_types([gguf.TokenType.CONTROL] * len(special) + [gguf.TokenType.BYTE] * 256
                      + [gguf.TokenType.NORMAL] * len(pieces))
    w.add_pad_token_id(0)
    w.add_eos_token_id(1)
    w.add_bos_token_id(2)
    w.add_unk_token_id(3)
    w.add_add_bos_token(True)

    def tensor(name: str, *shape: int, f16: bool = True) -> None:
        data = rng.standard_normal(shape).astype(np.float32) * 0.05
        w.add_tensor(name, data.astype(np.float16) if f16 else data)

    def norm(name: str, n: int = n_embd) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    tensor("token_embd.weight", n_vocab, n_embd)
    norm("output_norm.weight")
    for i in range(n_layer):
        b = f"blk.{i}"
        norm(f"{b}.attn_norm.weight")
        tensor(f"{b}.attn_q.weight", n_head * head_dim, n_embd)
        tensor(f"{b}.attn_k.weight", n_head_kv * head_dim, n_embd)
        tensor(f"{b}.attn_v.weight", n_head_kv * head_dim, n_embd)
        norm(f"{b}.attn_q_norm.weight", head_dim)
        norm(f"{b}.attn_k_norm.weight", head_dim)
        tensor(f"{b}.attn_output.weight", n_embd, n_head * head_dim)
        norm(f"{b}.post_attention_norm.weight")
        norm(f"{b}.ffn_norm.weight")
        tensor(f"{b}.ffn_gate.weight", n_ff, n_embd)
        tensor(f"{b}.ffn_up.weight", n_ff, n_embd)
        tensor(f"{b}.ffn_down.weight", n_embd, n_ff)
        norm(f"{b}.post_ffw_norm.weight")
    return _finish(w, path)


def copy_tokenizer(writer, source: Path) -> None:
    """The tokenizer.* fields of another GGUF (its vocabulary, merges, special tokens, chat template)."""
    import gguf

    for key, field in gguf.GGUFReader(str(source)).fields.items():
        if key.startswith("tokenizer."):
            array = field.types[0] == gguf.GGUFValueType.ARRAY
            writer.add_key_value(key, field.contents(), field.types[0], sub_type=field.types[-1] if array else None)


def write_random_llama(path: Path, tokenizer_from: Path, n_embd: int = 2048, n_layer: int = 22, n_ff: int = 5632,
                       n_head: int = 32, n_head_kv: int = 4, n_ctx_train: int = 4096) -> Path:
    """A random-weight llama of any size with another GGUF's tokenizer, for speed: the defaults are TinyLlama
    1.1B's shape (22 layers, the GPU figures of issue #28). F16; each shape's random block is drawn once and
    reused by every layer, so a 1.1B file (2.2 GB) is written in seconds. Speed does not depend on the values;
    the answers it gives are noise."""
    import gguf

    rng = np.random.default_rng(11)
    n_vocab = len(gguf.GGUFReader(str(tokenizer_from)).fields["tokenizer.ggml.tokens"].data)
    w = _shaped_writer(path, "llama", f"random llama {n_layer}x{n_embd}", n_ctx_train, n_embd, n_layer, n_ff, n_head,
                       n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10_000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    copy_tokenizer(w, tokenizer_from)
    drawn: dict[tuple, np.ndarray] = {}

    def tensor(name: str, *shape: int) -> None:
        if shape not in drawn:
            drawn[shape] = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)
        w.add_tensor(name, drawn[shape])

    def norm(name: str) -> None:
        w.add_tensor(name, np.ones(n_embd, dtype=np.float32))

    kv = n_head_kv * (n_embd // n_head)
    tensor("token_embd.weight", n_vocab, n_embd)
    norm("output_norm.weight")
    tensor("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        norm(f"{b}.attn_norm.weight")
        tensor(f"{b}.attn_q.weight", n_embd, n_embd)
        tensor(f"{b}.attn_k.weight", kv, n_embd)
        tensor(f"{b}.attn_v.weight", kv, n_embd)
        tensor(f"{b}.attn_output.weight", n_embd, n_embd)
        norm(f"{b}.ffn_norm.weight")
        tensor(f"{b}.ffn_gate.weight", n_ff, n_embd)
        tensor(f"{b}.ffn_up.weight", n_ff, n_embd)
        tensor(f"{b}.ffn_down.weight", n_embd, n_ff)
    return _finish(w, path)


def write_tokenizer_only(path: Path, source: Path) -> Path:
    """A GGUF with no tensors that holds another's tokenizer: what write_random_llama needs, a few MB."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    copy_tokenizer(w, source)
    return _finish(w, path)
