"""What happens when a chat outgrows the model's context: the context policies.

`window` is StreamingLLM on llama.cpp's KV cache: the first few tokens (the
attention sinks, which soak up attention mass the model must put somewhere)
and the system prompt stay; when the cache is full the oldest chunk after them
is removed and the rest is shifted down in position. Nothing is evaluated
twice, so generation goes on at a steady rate in fixed memory.

`truncate-middle` keeps the same tokens but rebuilds the cache by evaluating
the recent part again: the only choice when llama.cpp cannot shift a model's
cache (recurrent and sliding-window-attention models), at the cost of a pause.

`stop` ends the answer when the context is full.

`h2o` (experimental, app/engine/context/h2o.py) keeps the tokens that received the most attention instead of the
oldest ones' neighbours: it evicts by attention scores read from the graph.

The Decoder calls `make_room(decoder, n)` when n more tokens do not fit and
`fit_prompt(decoder, prompt)` when a prompt is longer than the context. Both
keep `decoder.tokens` equal to the KV cache, at positions 0..n-1.
"""

from __future__ import annotations

import time

import llama_cpp

from app.core.errors import GenerationError
from app.engine.decoding.decode import common_prefix

DEFAULT_FRACTION = 0.5  # of the movable part, dropped at once: one shift per half window
NO_SHIFT_NOTICE = ("This model's KV cache cannot be shifted, so the context window falls back to "
                   "truncate-middle: when the context is full, the recent part is evaluated again (a pause).")
NO_SCORES_NOTICE = ("This model was loaded without reading attention scores, so the h2o context policy works as "
                    "the window policy does.")


def kv_can_shift(rt) -> bool:
    return bool(llama_cpp.llama_memory_can_shift(rt.memory))



def past_media(tokens: list[int], at: int) -> int:
    """`at`, moved forward to the end of an image or a sound it would cut. A medium is a run of placeholders in
    the token history (negative ids, app/engine/media/prompt.py); a policy keeps or drops a medium whole, never
    half of one: the model would read half an image as some other picture."""
    while 0 < at < len(tokens) and tokens[at] < 0 and tokens[at - 1] < 0:
        at += 1
    return at


def media_runs(tokens: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of media placeholders in the history."""
    runs, start = [], None
    for i, tok in enumerate(tokens):
        if tok < 0 and start is None:
            start = i
        elif tok >= 0 and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(tokens)))
    return runs


def too_long_error(n_prompt: int, n_ctx: int) -> GenerationError:
    return GenerationError(
        f"The conversation ({n_prompt} tokens) does not fit the model's context of {n_ctx} tokens; "
        "start a new chat, load the model with a larger context, or use the window context policy."
    )


def system_prefix(template, messages: list[dict], prompt_text: str) -> str | None:
    """The rendered text of the leading system message(s), if the prompt starts with it."""
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    if n == 0:
        return None
    try:
        text = template.render(messages[:n], add_generation_prompt=False)
    except Exception:  # a template that insists on a user turn: protect only the sinks
        return None
    return text if text and prompt_text.startswith(text) else None


def find_reuse(cached: list[int], start: int, prompt: list[int]) -> tuple[int, int, int] | None:
    """Where the cache's movable part (cached[start:]) reappears in the prompt.

    Returns (skip, at, length): cached[start+skip : start+skip+length] == prompt[at : at+length],
    the longest such run found from a few anchors. A few anchors, not one, because the
    transcript, tokenized afresh, can split the first tokens after a dropped chunk differently.
    """
    movable = cached[start:]
    best = None
    for skip in (0, 8, 32, 128):
        anchor = movable[skip : skip + 8]
        if not anchor:
            break
        want = len(movable) - skip
        first = anchor[0]
        # Latest first: the cache holds the recent text, and repetitive text matches in many places.
        for at in reversed([i for i in range(start, len(prompt)) if prompt[i] == first]):
            if prompt[at : at + len(anchor)] != anchor:
                continue
            length = common_prefix(prompt[at : at + want], movable[skip:])
            if best is None or length > best[2]:
                best = (skip, at, length)
            if length == want:
                break
        if best is not None:
            return best
    return None


class ContextPolicy:
    """Base: the protected head (sinks + system prompt) and the window's counters."""

    name = "stop"

    def __init__(self, sink_tokens: int = 4, keep_system: bool = True, fraction: float = DEFAULT_FRACTION):
        self.sink_tokens = max(0, int(sink_tokens))
        self.keep_system = keep_system
        self.fraction = min(max(float(fraction), 0.05), 1.0)
        self.notice: str | None = None
        self.system_text: str | None = None
        self._system_tokens: tuple[str, list[int]] | None = None
        self.reset()

    def reset(self) -> None:
        """A new conversation: the counters start over."""
        self.dropped = 0
        self.shifts = 0
        self.rebuilds = 0
        self.reevaluated = 0
        self.pauses: list[float] = []  # seconds each truncate-middle rebuild took

    # --- the head that never slides -------------------------------------
    def system_tokens(self, rt) -> list[int]:
        text = self.system_text
        if not (self.keep_system and text):
            return []
        if self._system_tokens is None or self._system_tokens[0] != text:
            self._system_tokens = (text, rt.tokenize(text, add_special=rt.add_bos(), parse_special=True))
        return self._system_tokens[1]

    def protected(self, rt, tokens: list[int]) -> int:
        """How many leading tokens of `tokens` stay: the sinks, and the system prompt when kept."""
        span = self.sink_tokens
        system = self.system_tokens(rt)
        if system and tokens[: len(system)] == system:
            span = max(span, len(system))
        # A system prompt as long as the context would leave no window to slide.
        return min(span, len(tokens), rt.n_ctx // 2)

    def chunk(self, movable: int, need: int) -> int:
        """Tokens to drop from a movable part of `movable` tokens when `need` more must fit."""
        return max(need, int(movable * self.fraction))

    # --- decoder hooks ---------------------------------------------------
    def make_room(self, decoder, n: int) -> bool:
        return False

    def fit_prompt(self, decoder, prompt: list[int]) -> list[int]:
        raise too_long_error(len(prompt), decoder.rt.n_ctx)

    def state(self, decoder) -> dict:
        out = {"policy": self.name, "n_cached": len(decoder.tokens), "dropped": self.dropped,
               "shifts": self.shifts, "sinks": self.sink_tokens}
        if self.rebuilds:
            out["rebuilds"] = self.rebuilds
            out["reevaluated"] = self.reevaluated
            out["pause_s_max"] = max(self.pauses)
        if self.notice:
            out["notice"] = self.notice
        return out


class SlidingContext(ContextPolicy):
    """`window` when the cache can shift, `truncate-middle` otherwise."""

    def __init__(self, shift: bool, sink_tokens: int = 4, keep_system: bool = True,
                 fraction: float = DEFAULT_FRACTION):
        super().__init__(sink_tokens, keep_system, fraction)
        self.shift = shift
        self.name = "window" if shift else "truncate-middle"

    def make_room(self, decoder, n: int) -> bool:
        rt = decoder.rt
        tokens = decoder.tokens
        need = len(tokens) + decoder.hidden + n - rt.n_ctx
        if need <= 0:
            return True
        head = past_media(tokens, self.protected(rt, tokens))
        movable = len(tokens) - head
        drop = past_media(tokens, head + self.chunk(movable, need)) - head
        if drop > movable:
            return False  # n alone does not fit beside the protected head
        if self.shift and self._shift_out(decoder, head, drop):
            return True
        return self._rebuild(decoder, head, drop)

    def _shift_out(self, decoder, start: int, count: int) -> bool:
        """Remove cache positions [start, start+count) and move the rest down: no re-evaluation."""
        rt = decoder.rt
        if not rt.kv_remove(start, start + count, decoder.seq):
            return False
        rt.kv_shift(start + count, -1, -count, decoder.seq)
        del decoder.tokens[start : start + count]
        decoder.recount_hidden()
        decoder.cached_text = None
        self.dropped += count
        self.shifts += 1
        return True

    def _rebuild(self, decoder, head: int, drop: int) -> bool:
        """Keep the head, evaluate the recent tokens again right after it (the pause)."""
        started = time.perf_counter()
        rt = decoder.rt
        recent = decoder.tokens[head + drop :]
        # A medium cannot be evaluated again from the history (its placeholders are no tokens): the rebuild
        # drops the recent part up to the end of its last medium, and keeps the text after it.
        last = max((i for i, tok in enumerate(recent) if tok < 0), default=-1)
        if last >= 0:
            drop += last + 1
            recent = recent[last + 1:]
        if rt.kv_remove(head, -1, decoder.seq):
            del decoder.tokens[head:]
        else:  # a cache that cannot cut its middle: start from nothing
            if any(tok < 0 for tok in decoder.tokens[:head]):
                return False  # the head would be evaluated again, and it holds a medium: no room to be made
            recent = decoder.tokens[:head] + recent
            rt.kv_clear(decoder.seq)
            del decoder.tokens[:]  # in place: the decode loop holds this very list
        decoder.recount_hidden()
        decoder.cached_text = None
        done = decoder.eval_tokens(recent, decoder.cancelled)
        self.dropped += drop
        self.rebuilds += 1
        self.reevaluated += done
        self.pauses.append(time.perf_counter() - started)
        # Cancelled half-way, the cache holds fewer recent tokens but still matches `tokens`,
        # and there is room: the decode loop goes on to notice the cancel itself.
        return True

    def fit_prompt(self, decoder, prompt: list[int]) -> list[int]:
        """Sinks + system prompt + the most recent part of a prompt longer than the context.

        The cache is reused where the prompt repeats what it holds (the normal case: the client
        resends the whole transcript, the cache holds the recent window of it), so a new turn
        evaluates only its new tokens.
        """
        rt = decoder.rt
        n_ctx = rt.n_ctx
        head = self.protected(rt, prompt)
        movable_room = n_ctx - head
        # Leave the same free space a shift would: the answer needs room to grow.
        start = len(prompt) - (movable_room - self.chunk(movable_room, 1))
        cached = decoder.tokens
        if cached[:head] == prompt[:head]:
            found = find_reuse(cached, head, prompt)
            if found is not None:
                skip, at, length = found
                fits = head + len(prompt) - at < n_ctx
                begin = at if fits else max(at, start)
                drop = skip + (begin - at)
                if begin < at + length and (drop == 0 or self.shift):
                    if drop == 0 or self._shift_out(decoder, head, drop):
                        start = begin
        # Whatever the cache never held or has let go of is out of the model's view.
        self.dropped = max(self.dropped, start - head)
        return prompt[:head] + prompt[start:]
