"""The embedding model, run by llama.cpp in an engine process of its own, beside the chat model's.

Its own process for the same reason the chat model has one (a crash in llama.cpp costs an error, not the
window), and its own context: all-MiniLM-L6-v2 is an encoder with mean pooling, not the chat model's hidden
states. It is loaded when indexing or searching starts and closed after (Embedder is a context manager), and
it runs below the caller's CPU priority, so a chat answer decoding beside it keeps its speed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.backends.client import EngineClient
from app.core.errors import ContextTooLong
from app.protocol.messages import LoadOptions

# MiniLM was trained on 512 positions (the engine's Embedder evaluates an input in one batch of n_ctx).
N_CTX = 512
# A question is a few tokens: one thread embeds it in 15-17 ms, two in 10-28 ms when the machine is free but up to
# 650 ms (p95) when another program holds a core, as llama.cpp's threads wait for each other at every operation
# (measured on the 2-core machine, load 2.6). Searching uses one; indexing, which embeds batches, all cores.
QUERY_THREADS = 1


class Embedder:
    def __init__(self, path: Path | str, n_threads: int | None = None):
        self.path = Path(path)
        # Vectors are stored under this name: a different model (or a different file of it) is never mixed in.
        self.model = f"{self.path.name}:{self.path.stat().st_size}"
        self.n_threads = n_threads
        self.client: EngineClient | None = None
        self.dim: int | None = None

    def open(self) -> "Embedder":
        if self.client is None:
            from app.backends.supervisor import Supervisor

            self.client = EngineClient(Supervisor(below_caller=True))
            self.client.load(LoadOptions(model_path=str(self.path), n_ctx=N_CTX, n_batch=N_CTX,
                                         n_threads=self.n_threads))
        return self

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit vectors (float32 rows), one per text. A text too long for the model is embedded by its start."""
        self.open()
        try:
            rows = self.client.embed(texts)["embeddings"]
        except ContextTooLong:
            rows = [self._fitting(t) for t in texts]
        out = np.asarray(rows, dtype=np.float32)
        self.dim = out.shape[1] if out.ndim == 2 else self.dim
        return out

    def _fitting(self, text: str) -> list[float]:
        while True:
            try:
                return self.client.embed([text])["embeddings"][0]
            except ContextTooLong:
                text = text[: len(text) * 3 // 4]

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()
