"""Speculative decoding: a drafter proposes k tokens, the target verifies them in one batch.

Lossless: every output token is sampled by the target's own sampler chain from the target's logits at that
position; a draft token only saves work when the target would have chosen it anyway.

Adaptive: whether it pays depends on this machine and model more than on the drafter. A verify batch of k+1
tokens costs anything from barely more than one plain step (memory-bound, GPU) to k+1 plain steps (Q4_1's
batched CPU kernel). The speculator measures those costs (once when the model loads, then from every real
step) and the acceptance rate as it goes, and picks the k with the most expected tokens per second, k = 0
(plain decoding) whenever nothing beats it.
"""

from __future__ import annotations

import threading
import time

import llama_cpp
import numpy as np

from app.core.errors import GenerationError, ModelLoadError
from app.engine.protocol import STATS, TOKEN

CALIBRATION_SIZES = (1, 2, 4, 8, 12)
MARGIN = 1.05  # a mode must promise this much over plain decoding before it is used
EXPLORE_EVERY = 32  # plain steps between probes, so a rising acceptance rate is noticed
DECAY = 0.9  # acceptance statistics forget with a half-life of about seven verify steps


class StepCosts:
    """Seconds per target step by batch size (1 = a plain step), robust to the odd slow outlier."""

    def __init__(self, n_max: int):
        self.t: list[float | None] = [None] * (n_max + 2)

    def observe(self, n: int, seconds: float) -> None:
        if n >= len(self.t):
            return
        old = self.t[n]
        if old is None:
            self.t[n] = seconds
        else:
            # A shared machine throws in slow steps; clip before averaging so one cannot flip a decision.
            self.t[n] = 0.85 * old + 0.15 * min(max(seconds, 0.5 * old), 2.0 * old)

    def table(self, n_max: int) -> list[float]:
        """Cost for n = 0..n_max in one pass (the planner asks every step): measured, interpolated between
        measured sizes, and past the largest measured size grown linearly, the pessimistic guess."""
        known = [(i, v) for i, v in enumerate(self.t) if v is not None]
        out: list[float] = []
        j = 0
        for n in range(n_max + 1):
            while j < len(known) and known[j][0] < n:
                j += 1
            if j < len(known) and known[j][0] == n:
                out.append(known[j][1])
            elif j == 0:
                out.append(known[0][1] if known else 0.0)
            elif j == len(known):
                i1, v1 = known[-1]
                out.append(v1 * n / i1)
            else:
                (i0, v0), (i1, v1) = known[j - 1], known[j]
                out.append(v0 + (v1 - v0) * (n - i0) / (i1 - i0))
        return out

    def get(self, n: int) -> float:
        return self.table(n)[n]


class Speculator:
    """Owns a drafter and the decisions; `run` replaces the plain loop in Decoder.generate."""

    def __init__(self, drafter, draft_max: int | None = None, k_cap: int = 12, adaptive: bool = True):
        self.drafter = drafter
        # adaptive=False always drafts k_max tokens: for tests that must see drafts verified.
        self.adaptive = adaptive
        self.k_max = max(0, min(draft_max, k_cap) if draft_max is not None else k_cap)
        self.costs = StepCosts(self.k_max + 1)
        self.hits = 2.0  # prior: a fair chance, so a new drafter gets tried
        self.misses = 2.0
        self._rates: list[float] = []
        self.k = 0
        # What speculation really delivered (drafting included), decayed: the last word on whether it pays.
        self.spec_s = 0.0
        self.spec_tokens = 0.0
        self._reset_counts()

    # --- statistics -------------------------------------------------------
    def _reset_counts(self) -> None:
        self.drafted = 0
        self.accepted = 0
        self.steps = 0
        self.n_gen = 0
        self.elapsed = 0.0

    @property
    def alpha(self) -> float:
        return self.hits / (self.hits + self.misses)

    def summary(self) -> dict:
        plain = self.costs.get(1)
        rate = self.n_gen / self.elapsed if self.elapsed > 0 else 0.0
        return {
            "drafter": self.drafter.name,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance": self.accepted / self.drafted if self.drafted else 0.0,
            "tokens_per_step": self.n_gen / self.steps if self.steps else 0.0,
            "k": self.k,
            "speedup": rate * plain if plain > 0 and rate > 0 else 1.0,
        }

    # --- cost model -------------------------------------------------------
    def calibrate(self, decoder, reps: int = 3) -> None:
        """Time verify batches against a plain step on this machine and model, on a short dummy context."""
        rt = decoder.rt
        decoder.reset()
        decoder.eval_tokens(rt.tokenize("The quick brown fox jumps over the lazy dog. " * 3, add_special=True))
        base = len(decoder.tokens)
        batch = decoder._batch
        filler = decoder.tokens[1:]
        for n in CALIBRATION_SIZES:
            if n > self.k_max + 1:
                break
            times = []
            for _ in range(reps):
                _fill(batch, filler[:n], base, logits_all=True)
                started = time.perf_counter()
                decoder._decode(batch)
                times.append(time.perf_counter() - started)
                rt.kv_remove(base, -1)
            self.costs.t[n] = sorted(times)[len(times) // 2]
        if hasattr(self.drafter, "measure"):
            self.drafter.measure()
        decoder.reset()

    def _plan(self) -> None:
        """Expected tokens per second for each draft length; _rates[m] > 0 only where m beats plain."""
        if not self.adaptive:
            self._rates = [1.0] * (self.k_max + 1)
            self.k = self.k_max
            return
        a = self.alpha
        cost = self.costs.table(self.k_max + 1)
        plain_rate = 1.0 / max(cost[1], 1e-9)
        rates = [0.0] * (self.k_max + 1)
        best_k, best = 0, plain_rate * MARGIN
        expected, p = 1.0, 1.0
        step = getattr(self.drafter, "step_s", 0.0)
        for m in range(1, self.k_max + 1):
            p *= a
            expected += p  # tokens from a verify of m drafts: 1 + a + a^2 + ... + a^m
            rate = expected / (cost[m + 1] + step * m)
            if rate > plain_rate * MARGIN:
                rates[m] = rate
            if rate > best:
                best_k, best = m, rate
        self._rates = rates
        self.k = 0 if self._measured_slower() else best_k

    def _learn(self, drafted: int, accepted: int, seconds: float) -> None:
        self.hits = self.hits * DECAY + accepted
        self.misses = self.misses * DECAY + (1 if accepted < drafted else 0)
        self.spec_s = self.spec_s * DECAY + seconds
        self.spec_tokens = self.spec_tokens * DECAY + accepted + 1

    def _measured_slower(self) -> bool:
        plain = self.costs.t[1]
        return self.spec_tokens >= 8.0 and plain is not None and self.spec_s / self.spec_tokens > plain

    # --- the loop -----------------------------------------------------------
    def run(self, dec, sampler, stream, generated: list[int], emit, cancelled: threading.Event,
            sampling, n_prompt: int) -> tuple[int, str, float]:
        """Generate until a stop; returns (tokens generated, finish reason, time of the first token)."""
        rt = dec.rt
        ctx = rt.ctx
        n_vocab = rt.n_vocab
        tokens = dec.tokens
        drafter = self.drafter
        batch = dec._batch
        piece = rt.piece
        is_eog = dec.is_eog
        greedy = sampler.fast_greedy
        max_tokens = sampling.max_tokens
        ignore_eos = sampling.ignore_eos
        decode = llama_cpp.llama_decode
        from app.engine.decode import STATS_INTERVAL_S

        self._reset_counts()
        pending = sampler.sample(-1)
        t_first = time.perf_counter()
        next_stats = t_first + STATS_INTERVAL_S
        drafter.begin(tokens)
        self._plan()
        plain_run = 0
        # A probe costs a draft model its catch-up on everything it skipped: probe it less often.
        explore_every = EXPLORE_EVERY * (4 if drafter.follows_kv else 1)
        n_gen = 0
        new = [pending]  # tokens to hand out; all but the last are already in the KV cache

        def finish(reason: str) -> tuple[int, str, float]:
            self.n_gen = n_gen
            self.elapsed = time.perf_counter() - t_first
            return n_gen, reason, t_first

        while True:
            for j, tok in enumerate(new):
                reason = None
                if is_eog(tok) and not ignore_eos:
                    reason = "stop"
                else:
                    n_gen += 1
                    generated.append(tok)
                    text = stream.feed(piece(tok))
                    if text:
                        emit({"ev": TOKEN, "text": text})
                    if stream.stopped:
                        reason = "stop"
                    elif n_gen >= max_tokens:
                        reason = "length"
                    elif cancelled.is_set():
                        reason = "cancelled"
                if reason is not None:
                    extra = len(new) - 1 - j
                    if extra:  # accepted drafts past the stop: the KV ends where plain decoding's would
                        cut = len(tokens) - extra
                        rt.kv_remove(cut, -1)
                        del tokens[cut:]
                    return finish(reason)
            pending = new[-1]
            drafter.advance([pending])

            k = self.k
            if k == 0 and self.k_max and plain_run >= explore_every:
                k = min(2, self.k_max)
            draft: list[int] = []
            t_step = time.perf_counter()
            if k:
                draft = drafter.propose(min(k, max_tokens - n_gen))
                if draft and not (k != self.k or self._rates[len(draft)] > 0.0):
                    draft = []  # shorter than planned and too short to pay
                if draft:
                    n_before = len(tokens)
                    if not dec.room_for(len(draft) + 1):
                        draft = []
                    tokens = dec.tokens
                    if len(tokens) != n_before and drafter.follows_kv:
                        drafter.begin(tokens + [pending])  # the window moved: re-read the history once

            started = time.perf_counter()
            if not draft:
                if len(tokens) >= rt.n_ctx:
                    if not dec.room_for(1):
                        return finish("context_full")
                    tokens = dec.tokens
                    if drafter.follows_kv:
                        drafter.begin(tokens + [pending])
                dec._one[0] = pending
                rc = decode(ctx, dec._batch_one)
                if rc != 0:
                    raise GenerationError(f"llama.cpp failed to evaluate a token (code {rc}).")
                tokens.append(pending)
                new = [sampler.sample(-1)]
                self.costs.observe(1, time.perf_counter() - started)
                plain_run += 1
            else:
                m = len(draft)
                base = len(tokens)
                _fill(batch, [pending] + draft, base, logits_all=True)
                dec._decode(batch)
                tokens.append(pending)
                new = []
                if greedy:
                    rows = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx), shape=(m + 1, n_vocab))
                    best = rows.argmax(axis=1).tolist()
                    for i in range(m + 1):
                        new.append(best[i])
                        if i == m or best[i] != draft[i]:
                            break
                else:
                    for i in range(m + 1):
                        t = sampler.sample(i)
                        new.append(t)
                        if i == m or t != draft[i]:
                            break
                a = len(new) - 1
                tokens.extend(draft[:a])
                if a < m:
                    rt.kv_remove(base + 1 + a, -1)
                drafter.advance(draft[:a])
                self.costs.observe(m + 1, time.perf_counter() - started)
                self.drafted += m
                self.accepted += a
                self._learn(m, a, time.perf_counter() - t_step)
                plain_run = 0
            self.steps += 1
            self._plan()

            now = time.perf_counter()
            if now >= next_stats:
                next_stats = now + STATS_INTERVAL_S
                self.n_gen, self.elapsed = n_gen, now - t_first
                stats = dec._stats(n_gen, t_first, now, n_prompt)
                stats["spec"] = self.summary()
                emit(stats)

    def close(self) -> None:
        close = getattr(self.drafter, "close", None)
        if close is not None:
            close()


def _fill(batch, toks: list[int], base: int, logits_all: bool) -> None:
    for i, tok in enumerate(toks):
        batch.token[i] = tok
        batch.pos[i] = base + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1 if logits_all else 0
    if not logits_all:
        batch.logits[len(toks) - 1] = 1
    batch.n_tokens = len(toks)


def check_speculation_options(options) -> None:
    """Refuse bad speculation options before anything loads (a wrong draft vocabulary, a negative cap)."""
    if options.draft_max is not None and options.draft_max < 0:
        raise ModelLoadError(f"--draft-max must be 0 or more, not {options.draft_max}.")
    if options.draft_model:
        from app.engine.vocab_compat import check_draft_compatible

        check_draft_compatible(options.model_path, options.draft_model)


def make_speculator(runtime, decoder) -> Speculator | None:
    """The speculator that the runtime's LoadOptions ask for (None: plain decoding), calibrated."""
    o = runtime.options
    if not (o.draft_model or o.lookup) or o.draft_max == 0:
        return None
    if o.draft_model:
        from app.engine.draft_model import DraftModelDrafter

        drafter = DraftModelDrafter(o, o.draft_model, runtime.extra_bufts, runtime.n_ctx)
        # Each draft token costs a full draft-model step: long drafts rarely pay.
        speculator = Speculator(drafter, o.draft_max, k_cap=8)
    else:
        from app.engine.lookup import LookupDrafter

        speculator = Speculator(LookupDrafter(), o.draft_max, k_cap=12)
    try:
        speculator.calibrate(decoder)
    except BaseException:
        speculator.close()
        raise
    return speculator
