"""The engine's own decode loop.

Why not `Llama.create_chat_completion`: it re-detokenizes the whole answer per
token and cannot shift the context. Here the loop keeps the token history that
matches the KV cache, so a new chat turn evaluates only its new tokens, and the
per-token path does only what it must (sample, append bytes, one decode).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import llama_cpp
import numpy as np

from app.core.errors import ContextTooLong, EmptyPrompt, GenerationError
from app.core.metrics import AnswerPeak, peak_rss_mb
from app.protocol import step_clock
from app.engine.decoding.detok import TextStream
from app.protocol.messages import DONE, PROGRESS, STATS, TOKEN, SamplingOptions
from app.engine.decoding.runtime import Runtime
from app.engine.decoding.sampling import Sampler
from app.engine.decoding.threads import SPLIT_KV_CELLS

Emit = Callable[[dict], None]
STATS_INTERVAL_S = 0.2  # the GUI graphs want at least four points a second


def fill_batch(batch, toks: list[int], base: int, logits_all: bool = False, seq: int = 0) -> None:
    """Put toks at positions base.. of sequence `seq`; logits on every row or only the last."""
    for i, tok in enumerate(toks):
        batch.token[i] = tok
        batch.pos[i] = base + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = 1 if logits_all else 0
    if not logits_all:
        batch.logits[len(toks) - 1] = 1
    batch.n_tokens = len(toks)


def decode_error(rc: int) -> GenerationError:
    """The error for a failed llama_decode, in words a user understands."""
    if rc == 1:
        return GenerationError("The context is full: llama.cpp found no room in the KV cache.")
    return GenerationError(f"llama.cpp failed to evaluate tokens (code {rc}).")


@dataclass(eq=False)
class Answer:
    """One answer in progress: what the plain loop holds in locals, and a parallel slot between two steps."""
    prompt_text: str
    prompt: list[int]
    sampling: SamplingOptions
    emit: Emit
    cancelled: threading.Event
    sampler: Sampler
    stream: TextStream
    t0: float
    t_prompt: float
    prompt_evaluated: int
    generated: list[int] = field(default_factory=list)
    t_first: float | None = None
    reason: str | None = None  # why it stopped; None while it runs
    next_stats: float = 0.0
    prompt_dropped: int = 0  # prompt tokens left out to fit the context (the window policy's fit_prompt)
    speculator: object = None  # app.engine.speculation.speculative.Speculator drafting this answer, if any
    memory: AnswerPeak | None = None  # the engine's peak memory during this answer, from its start
    media: object = None  # app.engine.media.prompt.MediaPrompt: the prompt's images and sounds, if any


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Decoder:
    """Generates on one Runtime, keeping `tokens` equal to what sequence `seq` of the KV cache holds.

    Without parallel slots there is one Decoder on sequence 0; with them, one per slot
    (app/engine/decoding/slots.py), which evaluates prompts here and decodes its tokens in the slots' shared batch.
    """

    def __init__(self, rt: Runtime, seq: int = 0):
        self.rt = rt
        self.seq = seq
        self.tokens: list[int] = []
        # KV cells beyond one per position: an M-RoPE image (Qwen2-VL) takes n_tokens cells for fewer positions.
        # media_extra: a medium's first placeholder -> its extra cells (app/engine/media/prompt.py).
        self.hidden = 0
        self.media_extra: dict[int, int] = {}
        # The text that `tokens` spell, when known: lets the next turn tokenize only its new text.
        self.cached_text: str | None = None
        self.last_prompt_evaluated = 0
        self.total_evaluated = 0
        self._batch = llama_cpp.llama_batch_init(rt.n_batch, 0, 1)
        self._one = (llama_cpp.llama_token * 1)()
        self._batch_one = llama_cpp.llama_batch_get_one(self._one, 1)
        self._eog: dict[int, bool] = {}
        self.cancelled: threading.Event | None = None
        # Hooks filled in by later features (context window, speculative decoding).
        self.context_policy = None
        self.speculator = None  # app.engine.speculation.speculative.Speculator when a drafter is configured

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None

    def reset(self) -> None:
        self.rt.kv_clear(self.seq)
        self.tokens = []
        self.cached_text = None
        self.media_extra.clear()
        self.hidden = 0

    def recount_hidden(self) -> None:
        """The extra cells of the media `tokens` still hold (after a policy or a truncation removed some)."""
        if not self.media_extra:
            self.hidden = 0
            return
        tokens, extra, hidden = self.tokens, self.media_extra, 0
        for i, tok in enumerate(tokens):
            if tok < 0 and (i == 0 or tokens[i - 1] >= 0):
                hidden += extra.get(tok, 0)
        self.hidden = hidden

    # --- prompt ---------------------------------------------------------
    def tokenize_prompt(self, prompt_text: str, literal: list[tuple[int, int]] = (),
                        limit: int | None = None) -> list[int]:
        """The prompt's tokens; the `literal` spans of its text (a user's own text, app/engine/prompt/literal.py) are
        tokenized with special-token parsing off. limit: past that many tokens the rest is not tokenized (a
        prompt that cannot fit is refused after at most a context's worth of work)."""
        cached = self.cached_text
        n = len(cached) if cached else 0
        if (cached and prompt_text.startswith(cached) and len(prompt_text) > n
                and all(end <= n or start >= n for start, end in literal)):
            # Only the new text is tokenized; it begins at a special-token boundary
            # (the end of the previous answer), so the split does not change tokens.
            rest = None if limit is None else max(limit - len(self.tokens), 0)
            return self.tokens + self._tokenize(prompt_text[n:], [(s - n, e - n) for s, e in literal if s >= n],
                                                add_special=False, limit=rest)
        return self._tokenize(prompt_text, literal, add_special=self.rt.add_bos(), limit=limit)

    def tokenize_text(self, text: str, literal, first: bool) -> list[int]:
        """One piece of a prompt's text (the text between two media of a MediaPrompt): with the model's BOS where
        it is the prompt's first piece, its literal spans kept literal."""
        return self._tokenize(text, literal, add_special=first and self.rt.add_bos())

    def _tokenize(self, text: str, literal, add_special: bool, limit: int | None = None) -> list[int]:
        tokenize = self.rt.tokenize
        if not literal:
            return tokenize(text, add_special=add_special, parse_special=True, limit=limit)
        out = tokenize(text[: literal[0][0]], add_special=add_special, parse_special=True, limit=limit)
        for i, (start, end) in enumerate(literal):
            if limit is not None and len(out) > limit:
                break
            out += tokenize(text[start:end], add_special=False, parse_special=False)
            upto = literal[i + 1][0] if i + 1 < len(literal) else len(text)
            out += tokenize(text[end:upto], add_special=False, parse_special=True,
                            limit=None if limit is None else max(limit - len(out), 0))
        return out

    def sync_prefix(self, prompt: list[int], whole=None) -> int:
        """Drop KV entries past the shared prefix; return how many prompt tokens stay cached. whole(keep): the
        prefix moved back to where it cuts nothing that must be evaluated whole (an image)."""
        keep = common_prefix(self.tokens, prompt)
        if whole is not None:
            keep = whole(keep)
        if keep == len(prompt):
            keep -= 1  # we need logits for the last prompt token, so evaluate it again
        if keep < len(self.tokens) and not self.truncate(keep):
            self.reset()
            keep = 0
        return keep

    def eval_tokens(self, toks: list[int], cancelled: threading.Event | None = None,
                    progress: Callable[[int], None] | None = None) -> int:
        """Evaluate tokens in batches, logits on the last one only. Returns how many were evaluated.
        progress(done) after each batch."""
        batch = self._batch
        n_batch = self.rt.n_batch
        done = 0
        while done < len(toks):
            if cancelled is not None and cancelled.is_set():
                break
            chunk = toks[done : done + n_batch]
            fill_batch(batch, chunk, len(self.tokens), seq=self.seq)
            step_clock.mark(len(chunk))  # a prompt batch is one step for the watchdog, its budget by its size
            self._decode(batch)
            self.tokens.extend(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done)
        self.total_evaluated += done
        return done

    # --- steps: what both the plain loop and the speculative one do to the KV cache ---------------------
    # They keep `tokens` equal to the KV cache, so callers never touch llama.cpp's batches themselves.
    def decode_one(self, tok: int) -> None:
        """Evaluate one token after the cached ones, logits for it: the plain decoding step."""
        if self.seq:  # llama_batch_get_one's batches belong to sequence 0
            fill_batch(self._batch, [tok], len(self.tokens), seq=self.seq)
            self._decode(self._batch)
        else:
            self._one[0] = tok
            rc = llama_cpp.llama_decode(self.rt.ctx, self._batch_one)
            if rc != 0:
                raise decode_error(rc)
        self.tokens.append(tok)

    def verify(self, toks: list[int]) -> np.ndarray:
        """Evaluate toks after the cached ones in one batch, logits on every row; returns those rows.

        The rows are llama.cpp's own buffer, valid until the next decode; the tokens stay in the history
        until `truncate` drops the rejected ones. Callers count what they keep in `total_evaluated`.
        """
        n = len(toks)
        fill_batch(self._batch, toks, len(self.tokens), logits_all=True, seq=self.seq)
        step_clock.mark(n)
        self._decode(self._batch)
        self.tokens.extend(toks)
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits(self.rt.ctx), shape=(n, self.rt.n_vocab))

    def truncate(self, to: int) -> bool:
        """Forget the tokens from position `to` on, in the KV cache and in `tokens`.

        False when llama.cpp could not remove them (some memories cannot drop a tail); `tokens` is cut all
        the same, so a caller that must have the two agree resets.
        """
        ok = self.rt.kv_remove(to, -1, self.seq)
        del self.tokens[to:]
        if self.hidden:
            self.recount_hidden()
        return ok

    def _decode(self, batch) -> None:
        rc = llama_cpp.llama_decode(self.rt.ctx, batch)
        if rc != 0:
            raise decode_error(rc)

    def is_eog(self, token: int) -> bool:
        flag = self._eog.get(token)
        if flag is None:
            flag = self._eog[token] = self.rt.is_eog(token)
        return flag

    def room_for(self, n: int) -> bool:
        """Make room for n more tokens in the context; False if the policy says stop."""
        if len(self.tokens) + self.hidden + n <= self.rt.n_ctx:
            return True
        if self.context_policy is not None:
            return self.context_policy.make_room(self, n)
        return False

    # --- generation -----------------------------------------------------
    def begin(self, prompt_text: str, sampling: SamplingOptions, emit: Emit, cancelled: threading.Event,
              truncate: bool = True, literal: list[tuple[int, int]] = (), speculator=None, media=None) -> "Answer":
        """Tokenize and evaluate a prompt (only what the cache does not hold) and set up its answer.

        truncate=False: a prompt longer than the context is an error (ContextTooLong), never cut to fit
        by the context policy (the API's rule).
        media: an app.engine.media.prompt.MediaPrompt, the prompt already in pieces with its images and sounds;
        one that cannot fit the context is refused before anything is evaluated, never cut.
        """
        self.cancelled = cancelled  # a context policy's rebuild stops on it too
        rt = self.rt
        t0 = time.perf_counter()
        dropped = 0
        # The API never truncates: past the context, how much longer a prompt is needs no tokenizing, and a
        # prompt whose bytes alone say so is refused before any (a 10 MB one-word prompt took 8-13 s to tokenize).
        if media is not None:
            media.check_fits(rt.n_ctx)
            prompt = media.tokens
        elif not truncate and rt.surely_longer(prompt_text, rt.n_ctx - 1):
            raise ContextTooLong(_too_long(rt.n_ctx))
        else:
            prompt = self.tokenize_prompt(prompt_text, literal, limit=None if truncate else rt.n_ctx)
        if not prompt:  # llama.cpp would sample from logits that were never computed, and abort
            raise EmptyPrompt("There is nothing to answer: the prompt is empty (for a chat, the model's chat "
                                  "template rendered the conversation as nothing).")
        if len(prompt) >= rt.n_ctx and media is None:
            if not truncate:
                raise ContextTooLong(_too_long(rt.n_ctx, len(prompt) if len(prompt) <= rt.n_ctx else None))
            if self.context_policy is not None:
                full = len(prompt)
                prompt = self.context_policy.fit_prompt(self, prompt)
                dropped = full - len(prompt)
            else:
                raise GenerationError(
                    f"The conversation ({len(prompt)} tokens) does not fit the model's context of "
                    f"{rt.n_ctx} tokens; start a new chat or load the model with a larger context."
                )
        keep = self.sync_prefix(prompt, media.whole_keep if media is not None else None)
        self.cached_text = None
        if sampling.greedy and len(prompt) + (sampling.max_tokens if speculator is not None else 0) >= SPLIT_KV_CELLS:
            # Past that many cells the thread count changes a greedy answer's tokens: it holds one count (a
            # speculative answer never moves its count, so it holds from the start if it can get there).
            rt.hold_threads(True)
        rt.threads_for_answer()  # before the prompt: a busy machine stalls a full thread count at once
        todo = prompt[keep:]
        progress = None
        if getattr(emit, "prompt_progress", False) and len(todo) > rt.n_batch:
            # Reading a long prompt takes seconds to minutes: a client that draws (the window; see
            # app/engine/process/host.py) hears after each batch how far it is.
            def progress(done: int, total: int = len(todo)) -> None:
                emit({"ev": PROGRESS, "prompt_done": done, "prompt_total": total, "fraction": round(done / total, 3)})

            progress(0)
        memory = AnswerPeak()  # the prompt's reading counts: it is this answer's
        try:
            if media is not None:
                self.last_prompt_evaluated = media.evaluate(self, cancelled, progress)
            else:
                self.last_prompt_evaluated = self.eval_tokens(todo, cancelled, progress)
        except BaseException:
            memory.end()
            raise
        t_prompt = time.perf_counter()
        answer = Answer(prompt_text, prompt, sampling, emit, cancelled, Sampler(rt.ctx, rt.n_vocab, sampling,
                        self.tokens, vocab=rt.vocab), TextStream(sampling.stop), t0, t_prompt, self.last_prompt_evaluated)
        answer.next_stats = t_prompt + STATS_INTERVAL_S
        answer.prompt_dropped = dropped
        answer.speculator = speculator
        answer.memory = memory
        answer.media = media
        # The prompt's figures before the first token: an API response that opens with its usage (Anthropic's
        # message_start) has them, and the monitor shows the prompt's size while the answer starts.
        emit({**self.stats_event(0, None, t_prompt, len(prompt), speculator),
              "prompt_evaluated": self.last_prompt_evaluated})
        if cancelled.is_set():
            answer.reason = "cancelled"
        return answer

    def generate(self, prompt_text: str, sampling: SamplingOptions, emit: Emit,
                 cancelled: threading.Event | None = None, truncate: bool = True,
                 literal: list[tuple[int, int]] = (), speculator=None, media=None) -> dict:
        """One whole answer, token by token (or speculatively: with `speculator`, else the model's own); its
        Done event."""
        cancelled = cancelled or threading.Event()
        speculator = speculator or self.speculator
        answer = self.begin(prompt_text, sampling, emit, cancelled, truncate, literal, speculator, media)
        rt = self.rt
        sampler, stream, generated = answer.sampler, answer.stream, answer.generated
        hand_out = self.hand_out
        decode_one = self.decode_one
        tokens = self.tokens
        max_tokens = sampling.max_tokens
        ignore_eos = sampling.ignore_eos
        n_prompt = len(answer.prompt)
        t_first = None
        next_stats = answer.next_stats
        reason = answer.reason
        threads = rt.threads  # None: a fixed count
        # A greedy answer holds one thread count once its context passes SPLIT_KV_CELLS (see app/engine/decoding/threads.py).
        watch = sampling.greedy and rt.count_changes_answers and not rt.threads_held
        t_last = time.perf_counter()
        try:
            if speculator is not None and reason is None:
                _, reason, t_first = speculator.run(self, sampler, stream, generated, emit, cancelled, sampling,
                                                    n_prompt)
            while reason is None:
                tok = sampler.sample(-1)
                if t_first is None:
                    t_first = time.perf_counter()
                reason = hand_out(tok, generated, stream, emit, max_tokens, ignore_eos, cancelled)
                if reason is not None:
                    break
                if len(tokens) + self.hidden >= rt.n_ctx and not self.room_for(1):
                    reason = "context_full"
                    break
                if watch and len(tokens) >= SPLIT_KV_CELLS:
                    rt.hold_threads(True)
                    watch = False
                decode_one(tok)
                now = time.perf_counter()
                if threads is not None:
                    rt.token_took(now - t_last)
                    t_last = now
                if now >= next_stats:
                    next_stats = now + STATS_INTERVAL_S
                    emit(self.stats_event(len(generated), t_first, now, n_prompt, speculator))
        finally:
            sampler.close()
            rt.hold_threads(False)  # the next answer's count is free again
        answer.t_first, answer.reason = t_first, reason
        return self.finish(answer)

    def finish(self, answer: "Answer") -> dict:
        """The Done event of an answer that has stopped (its reason set); the last text reaches the client first."""
        answer.sampler.close()
        n_gen = len(answer.generated)
        tail = answer.stream.flush()
        if tail:
            answer.emit({"ev": TOKEN, "text": tail})
        t_end = time.perf_counter()
        self.total_evaluated += n_gen
        if answer.media is None:
            self._remember_text(answer.prompt_text, answer.prompt, answer.generated)
        else:  # its text holds media markers: the next prompt is matched by its tokens (media by their hash)
            self.cached_text = None
        t0, t_prompt = answer.t0, answer.t_prompt
        gen_time = t_end - t_prompt
        result = {
            "ev": DONE,
            "text": answer.stream.text,
            "finish_reason": answer.reason,
            # A chat template's own turn marker (Session.chat adds it where it is plain text) ends the turn;
            # it is no stop sequence the client asked for.
            "stop_sequence": (None if answer.stream.stop_found in self.rt.turn_stops else answer.stream.stop_found),
            "prompt_tokens": len(answer.prompt),
            "prompt_evaluated": answer.prompt_evaluated,
            "completion_tokens": n_gen,
            "ttft_s": (answer.t_first or t_end) - t0,
            "prompt_s": t_prompt - t0,
            "prompt_tok_s": answer.prompt_evaluated / (t_prompt - t0) if t_prompt > t0 else 0.0,
            "gen_s": gen_time,
            "gen_tok_s": n_gen / gen_time if gen_time > 0 and n_gen else 0.0,
            "n_past": len(self.tokens),
            "n_ctx": self.rt.n_ctx,
            "prompt_dropped": answer.prompt_dropped,
            **(answer.media.figures() if answer.media is not None else {}),
            **self.rt.threads_now(),
            **self.rt.memory_now(),
            "peak_rss_mb": answer.memory.end() if answer.memory is not None else peak_rss_mb(),
        }
        if self.context_policy is not None:
            result["window"] = self.context_policy.state(self)
        if answer.speculator is not None:
            result["spec"] = answer.speculator.summary(n_gen)
            result.update(answer.speculator.drafter.report(answer.generated))
        return result

    def _remember_text(self, prompt_text: str, prompt: list[int], generated: list[int]) -> None:
        """Record the text the KV tokens spell, if it is exactly known."""
        if self.tokens[: len(prompt)] != prompt:
            return
        in_kv = self.tokens[len(prompt):]
        if in_kv != generated[: len(in_kv)]:
            return
        raw = b"".join(self.rt.piece(t) for t in in_kv)
        try:
            self.cached_text = prompt_text + raw.decode("utf-8")
        except UnicodeDecodeError:
            self.cached_text = None

    def hand_out(self, tok: int, generated: list[int], stream: TextStream, emit, max_tokens: int,
                 ignore_eos: bool, cancelled: threading.Event) -> str | None:
        """Give one sampled token to the answer and the client; the reason to stop there, or None.

        Shared by the plain loop and the speculative one, so both end an answer at the same token.
        """
        if not ignore_eos and self.is_eog(tok):
            return "stop"
        generated.append(tok)
        text = stream.feed(self.rt.piece(tok))
        if text:
            emit({"ev": TOKEN, "text": text})
        if stream.stopped:
            return "stop"
        if len(generated) >= max_tokens:
            return "length"
        if cancelled.is_set():
            return "cancelled"
        return None

    def stats_event(self, n_gen: int, t_first: float | None, now: float, n_prompt: int, speculator=None) -> dict:
        """The live `stats` event of an answer in progress (the plain loop and the speculative one send it)."""
        elapsed = now - (t_first or now)
        stats = {
            "ev": STATS,
            "completion_tokens": n_gen,
            "gen_tok_s": (n_gen - 1) / elapsed if elapsed > 0 and n_gen > 1 else 0.0,
            "n_past": len(self.tokens),
            "n_ctx": self.rt.n_ctx,
            "prompt_tokens": n_prompt,
            **self.rt.threads_now(),
            **self.rt.memory_now(),
        }
        if self.context_policy is not None:
            stats["window"] = self.context_policy.state(self)
        if speculator is not None:
            stats["spec"] = speculator.summary(n_gen)
        return stats


def _too_long(n_ctx: int, tokens: int | None = None) -> str:
    """The API's refusal of a prompt past the context (tokens: its length, where it was counted whole)."""
    size = f"{tokens} tokens long, more than" if tokens is not None else "longer than"
    return (f"This prompt is {size} the model's context of {n_ctx} tokens; shorten it or load the model with a "
            "larger context.")
