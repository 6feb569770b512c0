"""The h2o context policy (heavy-hitter eviction) on the real bundled model.

The cell->position map is checked against llama.cpp's own serialisation of the sequence
(llama_state_seq_get_data writes each cell's position in cell order) and its pos_min/pos_max, and by
decoding the next token where the map says it goes.
"""

from __future__ import annotations

import ctypes
import struct

import llama_cpp
import numpy as np
import pytest

from app.core.errors import HearthError
from app.engine.context.h2o import FLASH_OFF_NOTICE, PARALLEL_REFUSAL, choose_evicted, runs
from app.protocol.option_fields import OptionError, check_options
from app.protocol.messages import LoadOptions
from app.engine.process.session import Session
from tests.engine.kv_checks import CTX, STORY, SYSTEM, assert_cache_consistent, greedy, kv_span


def load(model, **kw) -> Session:
    kw.setdefault("n_ctx", CTX)
    kw.setdefault("context_policy", "h2o")
    return Session.load(LoadOptions(model_path=str(model), n_threads=1, extra_bufts=False, **kw))


def seq_positions(rt, seq: int = 0) -> list[int]:
    """Positions of the sequence's cells in cell order, as llama.cpp serialises them (llama-kv-cache.cpp
    state_write: magic, seq id, n_stream, then per stream a cell count and per cell pos, n_seq_id, seq ids)."""
    size = llama_cpp.llama_state_seq_get_size(rt.ctx, seq)
    buf = (ctypes.c_uint8 * size)()
    data = bytes(buf[: llama_cpp.llama_state_seq_get_data(rt.ctx, buf, size, seq)])
    _magic, _seq, n_stream = struct.unpack_from("<Iii", data, 0)
    assert n_stream == 1
    (count,) = struct.unpack_from("<I", data, 12)
    at, out = 16, []
    for _ in range(count):
        pos, n_seq = struct.unpack_from("<iI", data, at)
        at += 8 + 4 * n_seq
        out.append(pos)
    return out


def assert_map_is_llama_cpps(session) -> None:
    att, dec = session.rt.attention, session.decoder
    assert att.broken is None
    assert att.positions_in_cell_order() == seq_positions(session.rt)
    assert sorted(att.positions_in_cell_order()) == list(range(len(dec.tokens)))
    assert kv_span(session.rt) == (0, len(dec.tokens) - 1)


def test_generation_past_the_context_evicts_in_blocks_and_keeps_the_map_and_the_head(bundled_model):
    s = load(bundled_model)
    try:
        done = s.chat(STORY, greedy(420), lambda e: None, None)
        policy, dec = s.decoder.context_policy, s.decoder
        assert done["completion_tokens"] == 420
        assert policy.name == "h2o" and policy.evictions >= 2
        # Blocks: each eviction made room for many tokens, not one.
        assert policy.dropped / policy.evictions >= CTX // 4
        system = policy.system_tokens(s.rt)
        assert len(system) > 20 and dec.tokens[: len(system)] == system  # the protected head never goes
        # llama.cpp reuses freed cells: the map is not the identity, and it is llama.cpp's.
        assert s.rt.attention.positions_in_cell_order() != sorted(s.rt.attention.positions_in_cell_order())
        assert_map_is_llama_cpps(s)
        assert_cache_consistent(dec)  # the next token goes to position n, where the map says
        assert done["window"]["notice"] == FLASH_OFF_NOTICE
        # A speculative verify (several rows in one decode, into reused cells) and its rejected drafts dropped.
        dec.verify([dec.tokens[-1]] * 5)
        assert_map_is_llama_cpps(s)
        assert dec.truncate(len(dec.tokens) - 3)
        assert_map_is_llama_cpps(s)
        assert_cache_consistent(dec)
    finally:
        s.close()


def test_an_eviction_keeps_exactly_the_head_the_recent_part_and_the_best_scored_cells(bundled_model):
    s = load(bundled_model, h2o_heavy=0.25, h2o_recent=0.25)
    try:
        rt, dec, att, policy = s.rt, s.decoder, s.rt.attention, s.decoder.context_policy
        s.chat(STORY, greedy(CTX), lambda e: None, None)  # fills the cache, one eviction on the way
        dec.eval_tokens(list(range(1000, 1000 + CTX - len(dec.tokens))))  # the cache is full again
        assert len(dec.tokens) == CTX and att.broken is None
        # Known scores: position p scores (p * 37) % 101, so which ones are best is known.
        for cell in np.flatnonzero(att.cell_pos >= 0):
            p = int(att.cell_pos[cell])
            att.score[cell], att.seen_by[cell] = (p * 37) % 101, 1.0
        before_tokens, before_cells = list(dec.tokens), att.cell_pos.copy()
        head = policy.protected(rt, dec.tokens)
        assert policy.make_room(dec, 1)
        n_recent, n_heavy = CTX // 4, CTX // 4
        middle = range(head, CTX - n_recent)
        best = sorted(sorted(middle, key=lambda p: (-((p * 37) % 101), -p))[:n_heavy])
        kept = list(range(head)) + best + list(range(CTX - n_recent, CTX))
        assert dec.tokens == [before_tokens[p] for p in kept]
        # Each kept token stays in its cell, at its new place in the order; the evicted cells are empty.
        for new, old in enumerate(kept):
            (cell,) = np.flatnonzero(before_cells == old)
            assert att.cell_pos[cell] == new
        assert (att.cell_pos >= 0).sum() == len(kept)
        assert_map_is_llama_cpps(s)
        assert_cache_consistent(dec)
    finally:
        s.close()


def test_answer_unchanged_while_nothing_needs_evicting(bundled_model):
    """Reading the attention changes no token: the same load with flash attention off and the window policy."""
    answers = []
    for policy in ("h2o", "window"):
        s = load(bundled_model, n_ctx=512, context_policy=policy, flash_attn="off")
        try:
            done = s.chat(STORY, greedy(48), lambda e: None, None)
            answers.append(done["text"])
            assert done["window"].get("shifts", 0) == 0
            if policy == "h2o":
                assert done["window"].get("notice") is None  # flash attention was off already: nothing to say
                # One prompt batch and 47 single decodes (the last token is handed out, not decoded), each read
                # at the sampled layers only.
                assert len(s.rt.attention.layers) == 10
                assert s.rt.attention.reads == 10 * (1 + 47)
        finally:
            s.close()
    assert answers[0] == answers[1]


def test_refusals_are_one_sentence():
    with pytest.raises(HearthError) as parallel:
        Session.load(LoadOptions(model_path="unused.gguf", context_policy="h2o", n_parallel=2, extra_bufts=False))
    assert str(parallel.value) == PARALLEL_REFUSAL
    with pytest.raises(HearthError, match="--kv-type f16"):
        Session.load(LoadOptions(model_path="unused.gguf", context_policy="h2o", kv_type="q8_0", extra_bufts=False))
    with pytest.raises(OptionError, match="at most 90%"):
        check_options(LoadOptions(context_policy="h2o", h2o_heavy=0.6, h2o_recent=0.5))


def test_choose_evicted_and_runs():
    scores = np.array([9, 9, 1, 5, 0, 7, 2, 2, 8, 8], dtype=float)
    # head 2, 2 recent (8, 9), keep the 2 best of positions 2..7: 5 (7) and 3 (5).
    assert list(choose_evicted(scores, 2, 2, 2)) == [2, 4, 6, 7]
    assert list(choose_evicted(scores, 2, 2, 10)) == []
    # Ties: the later position stays.
    assert list(choose_evicted(np.zeros(6), 1, 1, 2)) == [1, 2]
    assert runs(np.array([2, 4, 6, 7])) == [(2, 3), (4, 5), (6, 8)]
    assert runs(np.array([], dtype=np.int64)) == []


@pytest.mark.heavy
def test_perplexity_at_70_percent_is_near_the_full_cache_and_at_25_near_the_window(bundled_model):
    """The issue's goals on 1,000 tokens of the pydoc text. Measured here (AVX2, 1 thread): full 11.55; at 70%
    window and h2o both within 0.2% of it; at 25% window 12.28, h2o 12.32. The margins (5%) are the method's
    claim, wide of what other CPUs' rounding moves."""
    from app.bench.window_texts import long_text
    from app.bench.window_policies import score_tokens
    from app.engine.context.attention_scores import AttentionScores
    from app.engine.decoding.runtime import Runtime

    n = 1000
    rt = Runtime(LoadOptions(model_path=str(bundled_model), n_ctx=n + 64, n_threads=1, flash_attn="off"),
                 extra_bufts=False, attention=AttentionScores(n + 64))
    try:
        tokens = rt.tokenize(long_text(), add_special=rt.add_bos())[:n]
        ppl = {(policy, share): float(np.exp(score_tokens(rt, tokens, policy, int(n * share), 4)[:, 0].mean()))
               for policy, share in (("full", 1.0), ("h2o", 0.7), ("window", 0.25), ("h2o", 0.25))}
    finally:
        rt.close()
    full = ppl["full", 1.0]
    assert full <= ppl["h2o", 0.7] * 1.01 and ppl["h2o", 0.7] <= full * 1.05
    assert ppl["h2o", 0.25] <= ppl["window", 0.25] * 1.05
    assert ppl["window", 0.25] > full  # a quarter of the text is not free


def test_a_prompt_longer_than_the_context_is_fitted_and_the_map_follows(bundled_model):
    s = load(bundled_model)
    try:
        long = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": " ".join(f"Line {i} of the logbook: calm seas." for i in range(60))}]
        done = s.chat(long, greedy(40), lambda e: None, None)
        dec, policy = s.decoder, s.decoder.context_policy
        assert done["prompt_dropped"] > 0 and done["completion_tokens"] == 40
        system = policy.system_tokens(s.rt)
        assert dec.tokens[: len(system)] == system
        assert_map_is_llama_cpps(s)
        assert_cache_consistent(dec)
    finally:
        s.close()
