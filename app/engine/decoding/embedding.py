"""Text embeddings from the loaded model: a second llama.cpp context on the same weights.

The chat context keeps its KV cache (the next chat turn reuses it) and its logits; embeddings need a
context made with embeddings on and mean pooling, so they get their own, made on the first request
(the weights are shared, only its KV cache and buffers cost memory). Each input is evaluated alone in
one batch and its pooled vector normalized to length 1, as OpenAI's embeddings are.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from app.core.errors import ContextTooLong, GenerationError, InvalidRequest, ModelLoadError
from app.protocol import step_clock
from app.engine.decoding.decode import decode_error, fill_batch

# Tokens of one input. llama.cpp pools one micro-batch, so a whole input is one batch, and every row of it is an
# output (logits included): ~0.4 GB of buffers per 1000 tokens with a 49k-token vocabulary.
MAX_EMBED_CTX = 2048
# Tokens of one request, all its inputs together: OpenAI's own bound. 2,048 inputs of 600 tokens held the engine
# for an hour (issue 56); a request is also embedded one input at a time between the engine's other work, and
# stops when its client leaves (EmbedJob).
MAX_EMBED_TOKENS = 300_000


class Embedder:
    def __init__(self, rt):
        self.rt = rt
        cp = llama_cpp.llama_context_default_params()
        self.n_ctx = min(rt.n_ctx, MAX_EMBED_CTX)
        cp.n_ctx = cp.n_batch = cp.n_ubatch = self.n_ctx  # a pooled input must fit one micro-batch
        cp.n_seq_max = 1
        cp.n_threads = cp.n_threads_batch = rt.n_threads
        cp.embeddings = True
        cp.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_MEAN
        self.ctx = llama_cpp.llama_init_from_model(rt.model, cp)
        if not self.ctx:
            raise ModelLoadError(f"llama.cpp could not create an embedding context for {rt.path.name}.")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_embd = llama_cpp.llama_model_n_embd(rt.model)
        self._batch = llama_cpp.llama_batch_init(self.n_ctx, 0, 1)

    def tokens_of(self, item) -> list[int]:
        """An input's tokens: a text is tokenized as a document (special-token text stays text)."""
        if isinstance(item, str):
            return self.rt.tokenize(item, add_special=True, parse_special=False)
        bad = [t for t in item if not 0 <= t < self.rt.n_vocab]
        if bad:
            raise InvalidRequest(f"Token id {bad[0]} is not in this model's vocabulary of {self.rt.n_vocab} tokens.")
        return list(item)

    def embed(self, inputs: list) -> dict:
        """{"embeddings": one unit-length vector per input, "prompt_tokens": tokens evaluated in all}, at once."""
        job = self.job(inputs)
        while not job.finished:
            job.step()
        return job.result()

    def job(self, inputs: list) -> "EmbedJob":
        """The request's inputs as work done one piece at a time (EmbedJob). Raises, before any tokenizing, for an
        input or a request whose bytes alone say it is too long."""
        for i, item in enumerate(inputs):
            if isinstance(item, str) and self.rt.surely_longer(item, self.n_ctx):
                raise ContextTooLong(f"Input {i} is longer than the {self.n_ctx} tokens one embedding can take; "
                                     "shorten it or split it.")
        given = sum(len(item) for item in inputs if not isinstance(item, str))  # token lists
        texts = "".join(item for item in inputs if isinstance(item, str))
        if given > MAX_EMBED_TOKENS or self.rt.surely_longer(texts, MAX_EMBED_TOKENS - given):
            raise _too_many_tokens()
        return EmbedJob(self, inputs)

    def checked_tokens(self, i: int, item) -> list[int]:
        toks = self.tokens_of(item)
        if not toks:
            raise InvalidRequest(f"Input {i} is empty; an embedding needs at least one token.")
        if len(toks) > self.n_ctx:
            raise ContextTooLong(f"Input {i} is {len(toks)} tokens long, more than the {self.n_ctx} tokens "
                                 "one embedding can take; shorten it or split it.")
        return toks

    def _one(self, toks: list[int]) -> list[float]:
        llama_cpp.llama_memory_clear(self.memory, True)
        fill_batch(self._batch, toks, 0, logits_all=True)  # pooling reads every row
        step_clock.mark(len(toks))
        rc = llama_cpp.llama_decode(self.ctx, self._batch)
        if rc != 0:
            raise decode_error(rc)
        pointer = llama_cpp.llama_get_embeddings_seq(self.ctx, 0)
        if not pointer:
            raise GenerationError("llama.cpp returned no pooled embedding for this model.")
        vector = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(self.n_embd,))
        vector = vector.astype(np.float64)
        norm = float(np.linalg.norm(vector))
        return (vector / norm if norm > 0 else vector).tolist()

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None


def _too_many_tokens() -> InvalidRequest:
    return InvalidRequest(f"These inputs are more than {MAX_EMBED_TOKENS:,} tokens together, the most one embeddings "
                          "request may take; send them in several requests.")


class EmbedJob:
    """One embeddings request, done one piece at a time so that the engine serves its other requests between the
    pieces (app/engine/process/host.py) and a cancel stops it within one: first every input is tokenized and
    checked (so that a request too big is refused before any embedding), then each is embedded."""

    def __init__(self, embedder: Embedder, inputs: list):
        self.embedder, self.inputs = embedder, inputs
        self.tokens: list[list[int]] = []
        self.vectors: list[list[float]] = []
        self.total = 0

    @property
    def finished(self) -> bool:
        return len(self.vectors) == len(self.inputs)

    def step(self) -> None:
        """Tokenize or embed one input; raises the request's error (too long, not in the vocabulary, ...)."""
        if len(self.tokens) < len(self.inputs):
            i = len(self.tokens)
            toks = self.embedder.checked_tokens(i, self.inputs[i])
            self.total += len(toks)
            if self.total > MAX_EMBED_TOKENS:
                raise _too_many_tokens()
            self.tokens.append(toks)
            return
        self.vectors.append(self.embedder._one(self.tokens[len(self.vectors)]))

    def result(self) -> dict:
        return {"embeddings": self.vectors, "prompt_tokens": self.total, "n_embd": self.embedder.n_embd}
