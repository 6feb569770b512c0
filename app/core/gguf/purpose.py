"""Whether a model writes text, from its metadata alone.

A BERT sentence-embedding GGUF loads like any other and, asked to chat, "answered" `[unused12] [unused4]`:
an encoder has no next-token head worth sampling. Such a model (an encoder architecture, or attention
that is not causal) is refused for chat and completion with one sentence, and offered where it serves:
embeddings. `models inspect` (header only) and the engine (the loaded model) decide alike.
"""

from __future__ import annotations

from typing import Callable

# llama.cpp's encoder-only architectures: they embed (or rank) text and cannot continue it.
ENCODERS = frozenset({"bert", "modern-bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3",
                      "neo-bert", "eurobert", "t5encoder", "roberta", "xlm-roberta"})
_RANK = 4  # llama.cpp's LLAMA_POOLING_TYPE_RANK: a reranker


def _is_false(value) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() in ("false", "0"))


def cannot_generate(name: str, architecture: str | None, meta: Callable[[str], object]) -> str | None:
    """The sentence that says why this model cannot chat; None for a model that writes text.
    meta(key) -> the metadata value (any type, or None)."""
    arch = architecture or ""
    if arch not in ENCODERS and not _is_false(meta(f"{arch}.attention.causal")):
        return None
    pooling = meta(f"{arch}.pooling_type")
    ranker = str(pooling).strip() == str(_RANK)
    what = "a reranking model" if ranker else "an embedding model"
    use = ("Use it to rank passages" if ranker else
           "Use it for embeddings: hearth serve answers /v1/embeddings with it")
    return (f"{name} is {what} ({arch}, attention that is not causal): it turns text into "
            f"{'scores' if ranker else 'vectors'} and cannot write an answer. {use}; for chat, load a chat model.")
