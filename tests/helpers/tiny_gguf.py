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
