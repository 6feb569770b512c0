"""Checks that a Decoder's token history and its KV sequence agree (the window's, h2o's and the slots' tests),
and the long chat those context-policy tests fill a small context with."""

from __future__ import annotations

import llama_cpp
import numpy as np

from app.engine.decoding.decode import Decoder
from app.protocol.messages import SamplingOptions
from app.engine.decoding.runtime import Runtime

CTX = 256  # llama.cpp's smallest context; a few hundred tokens fill it several times
SYSTEM = ("You are Captain Hearth, a pirate who answers every question with a sea shanty "
          "and always mentions the parrot named Biscuit.")
STORY = [{"role": "system", "content": SYSTEM},
         {"role": "user", "content": "Tell me a long story about the sea."}]


def greedy(n: int) -> SamplingOptions:
    return SamplingOptions(max_tokens=n, temperature=0.0, repeat_penalty=1.0, ignore_eos=True)


def kv_span(rt, seq: int = 0) -> tuple[int, int]:
    return (llama_cpp.llama_memory_seq_pos_min(rt.memory, seq), rt.kv_pos_max(seq))


def assert_cache_consistent(decoder: Decoder) -> None:
    """Exact: the KV sequence holds decoder.tokens at positions 0..n-1, and llama.cpp takes the next token there.

    (A wrong position does not get past the decode: llama.cpp refuses a position that does not follow.)
    """
    rt, tokens, seq = decoder.rt, decoder.tokens, decoder.seq
    assert kv_span(rt, seq) == (0, len(tokens) - 1)
    if len(tokens) < rt.n_ctx:
        n = len(tokens)
        decoder.eval_tokens([tokens[-1]])  # one more token at position n
        assert kv_span(rt, seq) == (0, n)
        assert rt.kv_remove(n, -1, seq)
        del decoder.tokens[n:]


# Evaluating the same tokens in other batch sizes (1, 7, 64, all at once) moved the last logits of the
# bundled Q4_1 model by up to 0.83 in absolute value and to a cosine of 0.9957 against each other (AMD EPYC,
# AVX2, 1 and 2 threads, extra buffer types on and off); the same batch sizes gave identical logits. So a
# cache that was evaluated in other batches than a fresh reference is compared with a cosine bound of 0.99,
# not equality: on another instruction set the kernels round differently again.
KERNEL_COS = 0.99


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def fresh_logits(options, tokens: list[int]) -> np.ndarray:
    """The last logits of evaluating tokens in a new context of its own (sequence 0, one slot)."""
    from dataclasses import replace

    rt = Runtime(replace(options, n_parallel=1), extra_bufts=False)
    fresh = Decoder(rt)
    try:
        fresh.eval_tokens(list(tokens))
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(rt.ctx, -1), shape=(rt.n_vocab,)).copy()
    finally:
        fresh.close()
        rt.close()


def assert_cache_means_its_tokens(decoder: Decoder, row: int = -1) -> None:
    """Up to kernel rounding: the logits of the decoder's last token (at `row` of the last decode) equal those
    of evaluating decoder.tokens afresh.

    Only for a cache whose entries were all computed with exactly these tokens in view (evaluated or rebuilt,
    never shifted): after a StreamingLLM shift the entries that stay were computed while the dropped tokens
    were still in view, which the window's perplexity test bounds instead.
    """
    rt = decoder.rt
    kept = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(rt.ctx, row), shape=(rt.n_vocab,)).copy()
    assert_cache_consistent(decoder)  # after reading the logits: it decodes one more token
    cos = cosine(kept, fresh_logits(rt.options, decoder.tokens))
    assert cos > KERNEL_COS, cos
