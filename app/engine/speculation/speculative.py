"""Speculative decoding: a drafter proposes k tokens, the target verifies them in one batch.

Lossless: every output token is sampled by the target's own sampler chain from the target's logits at that
position; a draft token only saves work when the target would have chosen it anyway.

Adaptive: whether it pays depends on this machine and model more than on the drafter. A verify batch of k+1
tokens costs anything from barely more than one plain step (memory-bound, GPU) to k+1 plain steps (Q4_1's
batched CPU kernel). The speculator takes those costs from a calibration measured once per model, machine and
llama.cpp build and kept (app/engine/speculation/spec_calibration.py), and learns the acceptance rate as it goes; it picks
the k with the most expected tokens per second, k = 0 (plain decoding) whenever nothing beats it.

The same answer every run: no decision depends on a timing taken during the answer, and every answer starts
from the same prior, so the verify schedule of a request is a function of the request alone. (On quantized
models it has to be: llama.cpp's batched kernels round differently from single steps, so another schedule can
flip a near-tie and with it the rest of a greedy answer.)

Never slower: when the calibration shows that no draft length could pay even if nine drafts in ten were
accepted (or a draft token costs over a third of a target step), the answer runs in Decoder's plain loop with
no extra work per token, and a draft model never even reads the prompt. Otherwise free drafts (prompt lookup, a
prediction) are checked against the plain tokens for nothing (a shadow) until their acceptance says verifying
pays, and a verify that lost against the plain steps it replaced makes the next try wait, twice as long after
each loss in a row.
"""

from __future__ import annotations

import threading
import time

from app.core.library.draft_pay import DRAFT_COST_LIMIT  # one limit, said before Load too
from app.core.errors import ModelLoadError
from app.engine.decoding.decode import STATS_INTERVAL_S
from app.engine.speculation.drafter import Drafter
from app.engine.speculation.spec_calibration import calibration, costs_of, measure_target, target_fields

MARGIN = 1.05  # a mode must promise this much over plain decoding before it is used
DECAY = 0.9  # acceptance statistics forget with a half-life of about seven observations
FIRST_BACKOFF = 8  # plain steps after the first losing verify; doubles with every further loss
MAX_BACKOFF = 1024
SHADOW_MAX = 8  # a shadow draft settles (and teaches its acceptance) within this many plain steps at most
DRAFT_PROBE_GAP = 32  # a draft model planned out is probed again after this many plain steps at the least
GIVE_UP_BACKOFF = 256  # a draft model backed off this far hands the rest of the answer to the plain loop

# The kept costs are wall seconds (app/engine/speculation/spec_calibration.py); the figures an answer reports are too.
clock = time.perf_counter


class StepCosts:
    """Seconds per target step by batch size (1 = a plain step), from the kept calibration."""

    def __init__(self, n_max: int):
        self.t: list[float | None] = [None] * (n_max + 2)

    def table(self, n_max: int) -> list[float]:
        """Cost for n = 0..n_max in one pass: measured, interpolated between measured sizes, and past the
        largest measured size grown linearly, the pessimistic guess."""
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


def expected_tokens(alpha: float, m: int) -> float:
    """Tokens from one verify of m drafts when each is accepted with probability alpha: 1 + a + ... + a^m."""
    return sum(alpha ** i for i in range(m + 1))


class Speculator:
    """Owns a drafter and the decisions; `run` replaces the plain loop in Decoder.generate."""

    def __init__(self, drafter: Drafter, draft_max: int | None = None, k_cap: int = 12, adaptive: bool = True):
        self.drafter = drafter
        # adaptive=False always drafts k_max tokens: for tests that must see drafts verified.
        self.adaptive = adaptive
        self.k_max = max(0, min(draft_max, k_cap) if draft_max is not None else k_cap)
        self.costs = StepCosts(self.k_max + 1)
        self._rates: list[float] = []
        self.k = 0
        # Why drafting cannot pay on this machine and model (None: it can); set by calibrate.
        self.plain_reason: str | None = None
        self._reset_counts()

    # --- statistics -------------------------------------------------------
    def _reset_counts(self) -> None:
        """Every answer starts from the same state, so its verify schedule depends on the request alone."""
        self.hits, self.misses = self.drafter.prior  # acceptance: accepted drafts against rejecting verifies
        # Plain steps to wait before the next verify, and the current length of that wait after losses.
        self.wait = 0
        self.backoff = 0
        # A free drafter's draft checked against plain steps instead of verified (see `run`), and how far.
        self.shadow: list[int] = []
        self.shadow_at = 0
        self.drafted = 0
        self.accepted = 0
        self.steps = 0
        self.n_gen = 0
        self.spent_s = 0.0

    @property
    def alpha(self) -> float:
        return self.hits / (self.hits + self.misses)

    def summary(self, n_gen: int | None = None) -> dict:
        """Figures for `stats` and `done`; n_gen covers the whole answer: tokens made by the plain loop after
        a hand-over count one plain step each."""
        n = self.n_gen if n_gen is None else n_gen
        plain = self.costs.get(1)
        after = max(0, n - self.n_gen)
        steps = self.steps + after
        spent = self.spent_s + after * plain
        return {
            "drafter": self.drafter.name,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance": self.accepted / self.drafted if self.drafted else 0.0,
            "tokens_per_step": n / steps if steps else (1.0 if n else 0.0),
            "k": self.k,
            "speedup": n * plain / spent if spent > 0 and n else 1.0,
            "plain_reason": self.plain_reason,
        }

    # --- cost model -------------------------------------------------------
    def calibrate(self, decoder, renew: bool = False) -> None:
        """Take verify batches' costs against a plain step from the kept calibration of this model and machine
        (measuring it if there is none, or if asked to renew it), then decide whether drafting can pay at all."""
        entry = calibration(target_fields(decoder.rt), lambda threads: measure_target(decoder, threads), renew)
        for n, seconds in costs_of(entry).items():
            if n < len(self.costs.t):
                self.costs.t[n] = seconds
        self.drafter.measure(renew)
        self.plain_reason = self._why_plain()

    def _why_plain(self) -> str | None:
        """Why no draft length can beat plain decoding here, even with optimistic acceptance; None if one can."""
        if self.k_max == 0:
            return "draft length capped at 0"
        cost = self.costs.table(self.k_max + 1)
        plain = cost[1]
        step = self.drafter.step_s
        if self.drafter.follows_kv and step >= DRAFT_COST_LIMIT * plain:
            return (f"a draft token costs {step / plain:.0%} of a target step; "
                    f"above {DRAFT_COST_LIMIT:.0%} drafting cannot pay")
        alpha = self.drafter.optimistic_alpha
        best = max(expected_tokens(alpha, m) * plain / (cost[m + 1] + step * m) for m in range(1, self.k_max + 1))
        if best < MARGIN:
            return (f"verifying drafts costs nearly as much as plain steps: at most {best:.2f}x "
                    f"with {alpha:.0%} of drafts accepted")
        return None

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
        step = self.drafter.step_s
        for m in range(1, self.k_max + 1):
            p *= a
            expected += p
            rate = expected / (cost[m + 1] + step * m)
            if rate > plain_rate * MARGIN:
                rates[m] = rate
            if rate > best:
                best_k, best = m, rate
        self._rates = rates
        self.k = best_k

    def _learn(self, drafted: int, accepted: int) -> None:
        self.hits = self.hits * DECAY + accepted
        self.misses = self.misses * DECAY + (1 if accepted < drafted else 0)

    def _judge(self, m: int, accepted: int) -> None:
        """After a verify: by the calibrated costs, did it beat the plain steps it replaced? Losses make the
        next try wait, longer after every loss in a row; a win ends the back-off."""
        plain = self.costs.get(1)
        modelled = self.costs.get(m + 1) + self.drafter.step_s * m
        if (accepted + 1) * plain > modelled:
            self.backoff = 0
        elif self.adaptive:
            self.backoff = min(max(2 * self.backoff, FIRST_BACKOFF), MAX_BACKOFF)
            self.wait = self.backoff

    # --- the loop -----------------------------------------------------------
    def run(self, dec, sampler, stream, generated: list[int], emit, cancelled: threading.Event,
            sampling, n_prompt: int) -> tuple[int, str | None, float | None]:
        """Generate until a stop; returns (tokens generated, finish reason, time of the first token).
        Reason None hands the rest of the answer to Decoder.generate's plain loop: at once when drafting
        cannot pay here (no per-token work at all), or when a draft model kept losing."""
        self._reset_counts()
        self.k = 0
        if self.adaptive and self.plain_reason is not None:
            return 0, None, None
        n_ctx = dec.rt.n_ctx
        drafter = self.drafter
        hand_out = dec.hand_out
        max_tokens = sampling.max_tokens
        ignore_eos = sampling.ignore_eos

        pending = sampler.sample(-1)
        t_first = time.perf_counter()
        t_started = clock()
        next_stats = t_first + STATS_INTERVAL_S
        drafter.begin(dec.tokens)
        self._plan()
        # Prompt lookup costs next to nothing, so its drafts are checked against the plain tokens without
        # verifying them (a shadow): acceptance is learnt for free. A draft model is only probed now and then,
        # as each probe makes it catch up on everything it skipped.
        shadow_free = not drafter.follows_kv
        plain_run = 0
        n_gen = 0
        new = [pending]  # tokens to hand out; all but the last are already in the KV cache

        def finish(reason: str | None) -> tuple[int, str | None, float]:
            self.n_gen, self.spent_s = n_gen, clock() - t_started
            return n_gen, reason, t_first

        while True:
            for j, tok in enumerate(new):
                reason = hand_out(tok, generated, stream, emit, max_tokens, ignore_eos, cancelled)
                n_gen = len(generated)
                if reason is not None:
                    extra = len(new) - 1 - j
                    if extra:  # accepted drafts past the stop: the KV ends where plain decoding's would
                        dec.truncate(len(dec.tokens) - extra)
                    return finish(reason)
            pending = new[-1]
            drafter.advance([pending])

            k = self.k if not self.wait else 0
            probing = False
            if not k and not shadow_free and not self.wait and self.k_max:
                if self.backoff >= GIVE_UP_BACKOFF and self.adaptive:
                    k = -1  # hand over below, after this plain step
                elif plain_run >= max(DRAFT_PROBE_GAP, self.backoff):
                    k, probing = min(2, self.k_max), True
            draft = self._draft(k, max_tokens - n_gen, probing)
            if draft:
                n_before = len(dec.tokens)
                if not dec.room_for(len(draft) + 1):
                    draft = []
                if len(dec.tokens) != n_before and drafter.follows_kv:
                    drafter.begin(dec.tokens + [pending])  # the window moved: re-read the history once

            if not draft:
                if len(dec.tokens) >= n_ctx:
                    if not dec.room_for(1):
                        return finish("context_full")
                    if drafter.follows_kv:
                        drafter.begin(dec.tokens + [pending])
                dec.decode_one(pending)
                if k < 0:
                    self.steps += 1
                    return finish(None)  # the plain loop samples the logits just computed
                tok = sampler.sample(-1)
                new = [tok]
                plain_run += 1
                self.plain_step(tok)
            else:
                m = len(draft)
                base = len(dec.tokens)
                new = target_choices(sampler, draft, dec.verify([pending] + draft), 0)
                a = len(new) - 1
                if a < m:
                    dec.truncate(base + 1 + a)  # the rejected drafts
                drafter.advance(draft[:a])
                self.verified(m, a)
                plain_run = 0

            now = time.perf_counter()
            if now >= next_stats:
                next_stats = now + STATS_INTERVAL_S
                self.n_gen, self.spent_s = n_gen, clock() - t_started
                emit(dec.stats_event(n_gen, t_first, now, n_prompt, self))

    # --- the steps that `run` and a parallel slot (app/engine/decoding/slots.py) share ---------------------------
    def _draft(self, k: int, left: int, probing: bool = False) -> list[int]:
        """The draft to verify now ([] for a plain step). A free drafter's draft that is too short to pay, or
        any when k is 0, becomes the shadow that the plain steps check."""
        shadow_free = not self.drafter.follows_kv
        if k <= 0:
            if k == 0 and shadow_free and not self.shadow and self.k_max:
                self.shadow, self.shadow_at = self.drafter.propose(min(self.k_max, SHADOW_MAX)), 0
            return []
        draft = self.drafter.propose(min(k, left))
        if draft and not (probing or self._rates[len(draft)] > 0.0):
            if shadow_free and not self.shadow:
                self.shadow, self.shadow_at = draft, 0  # too short to pay; still worth watching
            return []
        return draft

    def plain_step(self, tok: int) -> None:
        """A plain step made `tok`: one step less to wait, and the shadow checked against it."""
        self.steps += 1
        if self.wait:
            self.wait -= 1
        shadow = self.shadow
        if shadow:
            hit = tok == shadow[self.shadow_at]
            self.shadow_at += hit
            if not hit or self.shadow_at == len(shadow):  # the draft is settled: learn as from a verify
                self._learn(len(shadow), self.shadow_at)
                self._plan()
                self.shadow = []

    def verified(self, m: int, accepted: int) -> None:
        """A verify of m drafts kept `accepted` of them: learn, judge, plan the next."""
        self.drafted += m
        self.accepted += accepted
        self.steps += 1
        self._learn(m, accepted)
        self._judge(m, accepted)
        self._plan()
        self.shadow = []

    # --- one answer in a parallel slot --------------------------------------------------------------
    def slot_begin(self, history: list[int]) -> None:
        """A new answer in a slot, after its prompt; only free drafters serve slots (a draft model's own
        context does not fit the slots' shared batch)."""
        self._reset_counts()
        self.drafter.begin(history)
        self._plan()
        self.spent_s, self._started = 0.0, clock()

    def slot_draft(self, left: int) -> list[int]:
        """The draft for this slot's rows of the next shared batch ([] for one plain row)."""
        if self.adaptive and self.plain_reason is not None:
            return []
        return self._draft(self.k if not self.wait else 0, left)

    def slot_tokens(self, tokens: list[int], n_gen: int) -> None:
        """The answer handed out these tokens: the drafter continues from them."""
        self.drafter.advance(tokens)
        self.n_gen, self.spent_s = n_gen, clock() - self._started

    def close(self) -> None:
        self.drafter.close()


def target_choices(sampler, draft: list[int], rows, first: int) -> list[int]:
    """The target's own tokens for a verified draft, from its logits rows first.. (one per draft token and one
    more): its choice at each row, up to and including the first that differs from the draft."""
    m = len(draft)
    new: list[int] = []
    if sampler.fast_greedy:
        best = rows[first : first + m + 1].argmax(axis=1).tolist()
        for i in range(m + 1):
            new.append(best[i])
            if i == m or best[i] != draft[i]:
                break
    else:
        for i in range(m + 1):
            t = sampler.sample(first + i)
            new.append(t)
            if i == m or t != draft[i]:
                break
    return new


def check_speculation_options(options) -> None:
    """Refuse bad speculation options before anything loads (a wrong draft vocabulary, a negative cap)."""
    if options.draft_max is not None and options.draft_max < 0:
        raise ModelLoadError(f"--draft-max must be 0 or more, not {options.draft_max}.")
    if options.draft_model:
        from app.engine.speculation.vocab_compat import check_draft_compatible

        check_draft_compatible(options.model_path, options.draft_model)


def make_speculator(runtime, decoder) -> Speculator | None:
    """The speculator that the runtime's LoadOptions ask for (None: plain decoding), calibrated."""
    o = runtime.options
    if not (o.draft_model or o.lookup) or o.draft_max == 0:
        return None
    if o.draft_model:
        from app.engine.speculation.draft_model import DraftModelDrafter

        drafter = DraftModelDrafter(o, o.draft_model, runtime.extra_bufts, runtime.n_ctx)
        # Each draft token costs a full draft-model step: long drafts rarely pay.
        speculator = Speculator(drafter, o.draft_max, k_cap=8)
    else:
        from app.engine.speculation.lookup import LookupDrafter

        speculator = Speculator(LookupDrafter(), o.draft_max, k_cap=12)
    try:
        speculator.calibrate(decoder)
    except BaseException:
        speculator.close()
        raise
    return speculator
