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
