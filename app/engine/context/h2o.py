"""`h2o`: the Heavy-Hitter Oracle on llama.cpp's KV cache (experimental).

When the cache is full, keep the protected start (attention sinks + the system prompt), the most recent
tokens, and, of the tokens between, the ones that received the most attention so far (the heavy hitters, scored
by app/engine/context/attention_scores.py); evict the rest in one block, so that the next eviction is a block of tokens
away, not one token.

Positions: the kept cells are shifted together, as the window policy shifts them, not left where they were (as
H2O's reference code leaves them). Why:
- the engine's one invariant is that `decoder.tokens` is the KV cache at positions 0..n-1 and the next token
  goes to position n (prompt reuse, speculative verify and the slots all rely on it); llama.cpp also needs the
  next position beyond every kept one, which compaction gives for free;
- kept positions would grow without bound past the model's training context (RoPE beyond it degrades the
  model), and endless generation in fixed memory is the point of a context policy;
- StreamingLLM measured that positions inside the cache, not in the original text, are what keep a model
  stable; the shift costs one K-shift per eviction, as the window's does.

Per eviction: one llama_memory_seq_rm per evicted run of positions, then one llama_memory_seq_add per kept run
after the first gap, moving it down by the evicted tokens before it (ascending, so every call selects by the
positions as they are then).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from app.core.errors import HearthError
from app.protocol.option_fields import H2O_FLASH_OFF, check_h2o_budgets
from app.protocol.messages import LoadOptions
from app.engine.context.window import SlidingContext, media_runs

DEFAULT_HEAVY = LoadOptions.h2o_heavy  # of the context kept for heavy hitters at an eviction
DEFAULT_RECENT = LoadOptions.h2o_recent  # of the context kept as the most recent tokens
FLASH_OFF_NOTICE = H2O_FLASH_OFF
PARALLEL_REFUSAL = ("The h2o context policy keeps one conversation's attention scores and cannot yet serve "
                    "--parallel slots; use the window policy with --parallel.")
BROKEN_NOTICE = "h2o could not follow where llama.cpp placed tokens ({why}); it evicts the oldest tokens instead."


def runs(positions: np.ndarray) -> list[tuple[int, int]]:
    """Sorted positions as [start, end) runs of consecutive ones."""
    if len(positions) == 0:
        return []
    breaks = np.flatnonzero(np.diff(positions) != 1)
    starts = np.concatenate([[positions[0]], positions[breaks + 1]])
    ends = np.concatenate([positions[breaks] + 1, [positions[-1] + 1]])
    return [(int(a), int(b)) for a, b in zip(starts, ends)]


def choose_evicted(scores: np.ndarray, head: int, n_recent: int, n_heavy: int) -> np.ndarray:
    """The positions to evict, sorted: of head..n-n_recent-1, all but the n_heavy best scored (ties: the later
    position stays, it has had fewer queries to collect attention from)."""
    n = len(scores)
    lo, hi = head, max(head, n - n_recent)
    middle = scores[lo:hi]
    if n_heavy >= len(middle):
        return np.empty(0, dtype=np.int64)
    # lexsort's last key is the primary one: by score, then by position.
    order = np.lexsort((np.arange(len(middle)), middle))
    return np.sort(order[: len(middle) - n_heavy]) + lo


def whole_media(tokens: list[int], evicted: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The evicted positions with no image or sound cut in half: a medium partly chosen goes whole where it lies in
    the evictable part [lo, hi), and stays whole where it reaches out of it."""
    runs = media_runs(tokens)
    if not runs or len(evicted) == 0:
        return evicted
    chosen = set(int(p) for p in evicted)
    for a, b in runs:
        hit = any(p in chosen for p in range(a, b))
        if not hit:
            continue
        if lo <= a and b <= hi:
            chosen.update(range(a, b))
        else:
            chosen.difference_update(range(a, b))
    return np.array(sorted(chosen), dtype=np.int64)


def evict(rt, seq: int, tokens: list[int], evicted: np.ndarray) -> None:
    """Remove the evicted positions from the KV cache and from `tokens` (in place) and close the gaps."""
    gaps = runs(evicted)
    for a, b in gaps:
        if not rt.kv_remove(a, b, seq):
            raise HearthError("llama.cpp could not remove KV cache entries for the h2o policy.")
    removed = 0
    for i, (a, b) in enumerate(gaps):
        removed += b - a
        end = gaps[i + 1][0] if i + 1 < len(gaps) else -1
        if end == -1 or end > b:
            rt.kv_shift(b, end, -removed, seq)
    keep = np.ones(len(tokens), dtype=bool)
    keep[evicted] = False
    tokens[:] = [tok for tok, k in zip(tokens, keep) if k]


def h2o_load(options):
    """The load options h2o needs and the scores object its context reads into; refuses what cannot work."""
    from app.engine.context.attention_scores import AttentionScores

    if options.n_parallel > 1:
        raise HearthError(PARALLEL_REFUSAL)
    if options.kv_type != "f16":
        raise HearthError(f"The h2o context policy needs flash attention off, and a {options.kv_type} KV cache needs "
                          "it on: use --kv-type f16 with h2o.")
    attention = AttentionScores(int(options.n_ctx))
    attention.notice = FLASH_OFF_NOTICE if options.flash_attn != "off" else None
    return replace(options, flash_attn="off"), attention


class HeavyHitterContext(SlidingContext):
    """The h2o policy; prompts longer than the context are fitted as the window fits them."""

    def __init__(self, scores, sink_tokens: int = 4, keep_system: bool = True, heavy: float = DEFAULT_HEAVY,
                 recent: float = DEFAULT_RECENT):
        check_h2o_budgets(heavy, recent)
        super().__init__(True, sink_tokens, keep_system)
        self.name = "h2o"
        self.scores = scores
        self.heavy, self.recent = float(heavy), float(recent)

    def reset(self) -> None:
        super().reset()
        self.evictions = 0

    def make_room(self, decoder, n: int) -> bool:
        rt = decoder.rt
        tokens = decoder.tokens
        if len(tokens) + decoder.hidden + n <= rt.n_ctx:
            return True
        self.scores.raise_error()
        head = self.protected(rt, tokens)
        n_recent = max(n, int(rt.n_ctx * self.recent))
        n_heavy = int(rt.n_ctx * self.heavy)
        # What stays must leave room for n: the heavy hitters give way first.
        n_heavy = max(0, min(n_heavy, rt.n_ctx - n - head - n_recent))
        if head + n_recent + n > rt.n_ctx:
            return False
        if self.scores.broken:
            self.notice = BROKEN_NOTICE.format(why=self.scores.broken)
            scores = np.arange(len(tokens), dtype=np.float64)  # the oldest go first: the window's choice
        else:
            scores = self.scores.by_position(len(tokens))
        evicted = whole_media(tokens, choose_evicted(scores, head, n_recent, n_heavy), head, len(tokens) - n_recent)
        evict(rt, decoder.seq, tokens, evicted)
        decoder.recount_hidden()
        decoder.cached_text = None
        self.dropped += len(evicted)
        self.shifts += 1
        self.evictions += 1
        return True

    def state(self, decoder) -> dict:
        out = super().state(decoder)
        out.update(heavy=self.heavy, recent=self.recent, evictions=self.evictions,
                   layers_sampled=len(self.scores.layers), layer_stride=self.scores.stride)
        return out
