"""Parallel slots: several requests at once on one model, their next tokens decoded in one batch.

Each slot is a Decoder on its own KV sequence with its own context policy, so the StreamingLLM window
slides per conversation. A request takes the free slot whose cache shares the longest start with its
prompt (API clients resend the whole conversation every turn, so a follow-up evaluates only its new
tokens), else the one used least recently. Its prompt is evaluated between two steps, then it joins the
shared batch while the others keep going: continuous batching, as llama-server does it.

Why one batch: on a CPU a token's cost is mostly reading the weights, which one `llama_decode` of N rows
does once for all N answers; N separate decodes read them N times.

Speculation per slot: an answer with a free drafter (prompt lookup, a prediction) puts its draft after its
next token in the same batch, with logits on each of those rows, and keeps what the target's own choices
confirm, as the one-request loop does (app/engine/speculation/speculative.py).
"""

from __future__ import annotations

import time
from typing import Callable

import llama_cpp
import numpy as np

from app.core.errors import GenerationError, HearthError
from app.engine.decoding.decode import STATS_INTERVAL_S, Answer, Decoder, common_prefix, decode_error
from app.protocol import messages as P
from app.protocol import step_clock
from app.engine.decoding.runtime import Runtime
from app.engine.speculation.speculative import target_choices
from app.engine.decoding.threads import SPLIT_KV_CELLS

SLOT_DRAFT_MAX = 16  # draft tokens one slot may put into a shared batch


class Slot:
    def __init__(self, rt: Runtime, seq: int, policy):
        self.decoder = Decoder(rt, seq)
        self.decoder.context_policy = policy
        self.answer: Answer | None = None
        self.row = -1  # this answer's first logits row in the last decode (-1: the last row, after its prompt)
        self.next_token = -1  # sampled, handed out, to be decoded in the next step
        self.draft: list[int] = []  # decoded after next_token in the current step, to be verified
        self.used = 0.0  # when its last answer ended: the least recently used free slot is taken first
        # The shared decodes of the current answer and how many answers they carried in all.
        self.steps = 0
        self.rows = 0

    @property
    def cached_text(self) -> str:
        return self.decoder.cached_text or ""


def shared_start(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    # Compare in big pieces first: the prompts are whole conversations.
    step = 4096
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Slots:
    """The running answers of a Session loaded with n_parallel > 1 (the engine host drives it)."""

    def __init__(self, rt: Runtime, make_policy: Callable[[], object]):
        self.rt = rt
        self.slots = [Slot(rt, seq, make_policy()) for seq in range(rt.n_parallel)]
        self._batch = llama_cpp.llama_batch_init(rt.n_parallel * (1 + SLOT_DRAFT_MAX), 0, 1)
        self.steps = 0  # shared decodes, and the answers they carried: the batching figures
        self.rows = 0

    # --- the host's view ---------------------------------------------------
    @property
    def running(self) -> bool:
        return any(slot.answer is not None for slot in self.slots)

    @property
    def has_free(self) -> bool:
        return any(slot.answer is None for slot in self.slots)

    def cancel_all(self) -> None:
        for slot in self.slots:
            if slot.answer is not None:
                slot.answer.cancelled.set()

    def reset(self) -> None:
        """Forget what the idle slots cache (a running answer keeps its own)."""
        for slot in self.slots:
            if slot.answer is None:
                slot.decoder.reset()
                slot.decoder.context_policy.reset()

    def start(self, prompt_text: str, system_text: str | None, sampling, emit, cancelled, truncate: bool,
              literal=(), make_speculator=None, media=None) -> None:
        """Evaluate a request's prompt in a free slot and hand out its first token. Raises what begin raises.
        make_speculator(decoder): the answer's Speculator (a free drafter), or None for plain steps.
        media: the prompt's images and sounds (app/engine/media/prompt.py), evaluated in this slot's sequence."""
        slot = self._pick(prompt_text, media)
        decoder = slot.decoder
        decoder.context_policy.system_text = system_text
        try:
            speculator = make_speculator(decoder) if make_speculator is not None else None
            answer = decoder.begin(prompt_text, sampling, emit, cancelled, truncate, literal, speculator, media)
        except BaseException:
            decoder.reset()  # a prompt evaluated half-way leaves the slot's cache unknown
            raise
        if speculator is not None:
            speculator.slot_begin(decoder.tokens)
        slot.answer, slot.row, slot.draft = answer, -1, []
        slot.steps = slot.rows = 0
        # Sampled now: the next decode, of the shared batch, replaces these logits.
        self._advance([slot], [[answer.sampler.sample(-1)] if answer.reason is None else [None]])

    def step(self) -> None:
        """Decode the next token of every running answer in one batch, then sample and hand out each one's next."""
        running = [slot for slot in self.slots if slot.answer is not None]
        if not running:
            return
        batch = self._batch
        n = 0
        spare = self.rt.n_batch - len(running)  # rows a decode may take beyond one per answer
        for slot in running:
            slot.row = n
            slot.draft = self._draft(slot, spare)
            spare -= len(slot.draft)
            base = len(slot.decoder.tokens)
            for j, tok in enumerate([slot.next_token] + slot.draft):
                batch.token[n] = tok
                batch.pos[n] = base + j
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = slot.decoder.seq
                batch.logits[n] = 1
                n += 1
        batch.n_tokens = n
        # A greedy answer past SPLIT_KV_CELLS holds one thread count (app/engine/decoding/threads.py), whichever slot it is in.
        if self.rt.count_changes_answers:
            self.rt.hold_threads(any(slot.answer.sampling.greedy and len(slot.decoder.tokens) >= SPLIT_KV_CELLS
                                     for slot in running))
        started = time.perf_counter()
        step_clock.mark(n)
        rc = llama_cpp.llama_decode(self.rt.ctx, batch)
        if rc != 0:
            self.fail_running(decode_error(rc))
            return
        self.steps += 1
        self.rows += len(running)
        if self.rt.threads is not None:  # a step is one token of each answer: the thread count follows its time
            self.rt.token_took(time.perf_counter() - started)
        logits = None
        if any(slot.draft and slot.answer.sampler.fast_greedy for slot in running):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self.rt.ctx), shape=(n, self.rt.n_vocab))
        # Every answer samples before any hands out: making room in one slot's context may evaluate
        # tokens (a truncate-middle rebuild), which replaces the logits the others still need.
        chosen, going = [], []
        for slot in running:
            decoder, draft = slot.decoder, slot.draft
            decoder.tokens += [slot.next_token] + draft
            slot.steps += 1
            slot.rows += len(running)
            try:
                if not draft:
                    new = [slot.answer.sampler.sample(slot.row)]
                else:
                    new = target_choices(slot.answer.sampler, draft, logits, slot.row)
                    if len(new) - 1 < len(draft):
                        decoder.truncate(len(decoder.tokens) - (len(draft) - (len(new) - 1)))  # the rejected drafts
            except HearthError as error:  # this answer's own (a grammar with no way on): the others go on
                self._fail(slot, error)
                continue
            going.append(slot)
            chosen.append(new)
        self._advance(going, chosen)

    def _draft(self, slot: Slot, spare: int) -> list[int]:
        """This slot's draft for the coming batch: what its speculator proposes, as far as its context has room
        without moving the window (a verify never makes room) and the batch has rows to spare."""
        speculator = slot.answer.speculator
        if speculator is None:
            return []
        room = self.rt.n_ctx - len(slot.decoder.tokens) - slot.decoder.hidden - 1
        left = slot.answer.sampling.max_tokens - len(slot.answer.generated)
        return speculator.slot_draft(min(SLOT_DRAFT_MAX, room, left, spare))

    # --- inside ------------------------------------------------------------
    def _pick(self, prompt_text: str, media=None) -> Slot:
        free = [slot for slot in self.slots if slot.answer is None]
        if not free:
            raise GenerationError("Every slot is busy.")  # the host admits a request only when one is free
        if media is not None:  # a prompt with images: the slot whose cache holds most of it, its images by hash
            return max(free, key=lambda slot: (common_prefix(slot.decoder.tokens, media.tokens), -slot.used))
        return max(free, key=lambda slot: (shared_start(slot.cached_text, prompt_text), -slot.used))

    def _advance(self, slots: list[Slot], chosen: list[list[int | None]]) -> None:
        """Hand out each slot's new tokens: all but the last are in its KV cache already (accepted drafts), the
        last is decoded in the next step."""
        now = time.perf_counter()
        for slot, new in zip(slots, chosen):
            answer, decoder = slot.answer, slot.decoder
            speculator = answer.speculator
            if answer.reason is None:
                if answer.t_first is None:
                    answer.t_first = now
                sampling = answer.sampling
                for j, tok in enumerate(new):
                    answer.reason = decoder.hand_out(tok, answer.generated, answer.stream, answer.emit,
                                                     sampling.max_tokens, sampling.ignore_eos, answer.cancelled)
                    if answer.reason is not None:
                        extra = len(new) - 1 - j
                        if extra:  # accepted drafts past the stop: the KV ends where plain decoding's would
                            decoder.truncate(len(decoder.tokens) - extra)
                        break
                if speculator is not None and tok is not None:
                    if slot.draft:
                        speculator.verified(len(slot.draft), len(new) - 1)
                    elif slot.row >= 0:
                        speculator.plain_step(tok)
                    speculator.slot_tokens(new, len(answer.generated))
                if (answer.reason is None and len(decoder.tokens) + decoder.hidden >= self.rt.n_ctx
                        and not decoder.room_for(1)):
                    answer.reason = "context_full"
            if answer.reason is not None:
                self._finish(slot)
                continue
            slot.next_token = new[-1]
            if now >= answer.next_stats:
                answer.next_stats = now + STATS_INTERVAL_S
                answer.emit(decoder.stats_event(len(answer.generated), answer.t_first, now, len(answer.prompt),
                                                speculator))

    def _finish(self, slot: Slot) -> None:
        answer, slot.answer = slot.answer, None
        slot.used = time.monotonic()
        result = slot.decoder.finish(answer)
        result["slot"] = slot.decoder.seq
        # How many answers its decodes carried on average (1.0: it ran alone).
        result["batch_rows"] = round(slot.rows / slot.steps, 2) if slot.steps else 1.0
        answer.emit(result)

    def fail_running(self, error: Exception) -> None:
        """A decode that failed takes its answers with it; each gets the error and keeps its partial text."""
        for slot in self.slots:
            if slot.answer is not None:
                self._fail(slot, error)

    def _fail(self, slot: Slot, error: Exception) -> None:
        answer, slot.answer = slot.answer, None
        answer.sampler.close()
        slot.decoder.reset()
        answer.emit(P.failed(P.ErrorKind.of(error), str(error), text=answer.stream.text))

    def batching(self) -> dict:
        """How full the shared batches were: answers decoded per step on average."""
        return {"n_parallel": len(self.slots), "steps": self.steps,
                "rows_per_step": round(self.rows / self.steps, 2) if self.steps else 0.0}

    def close(self) -> None:
        for slot in self.slots:
            if slot.answer is not None:
                slot.answer.sampler.close()
                slot.answer = None
            slot.decoder.close()
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None

