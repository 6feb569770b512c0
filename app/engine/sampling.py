"""Build llama.cpp's C sampler chain from SamplingOptions.

Greedy decoding without a repeat penalty skips the chain and takes the argmax
of the logits directly: the chain copies and sorts the whole vocabulary each
token, which on a small model is a measurable share of a token's time.

A grammar (structured output, tool calls) is llama.cpp's grammar sampler in
front of the chain; it needs the chain, so it turns the argmax path off.
"""

from __future__ import annotations

import ctypes
import random

import llama_cpp
import numpy as np

from app.core.errors import InvalidRequest
from app.engine import llamalog
from app.engine.protocol import SamplingOptions

# llama_get_logits_ith returning a plain address (llama_cpp's binding returns a float
# pointer object, slower to turn into an array); a separate prototype leaves theirs as is.
_logits_address = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
    ("llama_get_logits_ith", llama_cpp.llama_cpp._lib))


# llama.cpp parses a grammar recursively: groups nested ~20000 deep overflow the engine's stack (measured:
# 8000 parsed and sampled fine). JSON schemas nest a group per character of a string's maxLength.
MAX_GRAMMAR_DEPTH = 2000
MAX_GRAMMAR_CHARS = 1 << 20


def grammar_depth(grammar: str) -> int:
    """The deepest nesting of ( ) groups in a GBNF grammar, outside literals, character classes and comments."""
    depth = deepest = 0
    i, n = 0, len(grammar)
    while i < n:
        c = grammar[i]
        if c in "\"[":
            close = '"' if c == '"' else "]"
            i += 1
            while i < n and grammar[i] != close:
                i += 2 if grammar[i] == "\\" else 1
        elif c == "#":
            while i < n and grammar[i] != "\n":
                i += 1
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
        i += 1
    return deepest


def grammar_sampler(vocab, grammar: str):
    """llama.cpp's grammar sampler; raises InvalidRequest with llama.cpp's reason for a grammar it cannot parse.

    (Not llama.cpp's lazy grammar, which starts at a trigger text: a token that completes the trigger and
    goes on past what the grammar allows throws inside llama.cpp and kills the process.)"""
    if len(grammar) > MAX_GRAMMAR_CHARS or grammar_depth(grammar) > MAX_GRAMMAR_DEPTH:
        raise InvalidRequest(f"This grammar is too big for llama.cpp (at most {MAX_GRAMMAR_CHARS} characters and "
                             f"groups nested {MAX_GRAMMAR_DEPTH} deep; a JSON schema's maxLength counts as depth).")
    llamalog.clear()
    printed: list[str] = []
    with llamalog.native_stderr(printed):
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        lines = printed + llamalog.recent_lines()
        said = [line.split("error parsing grammar:", 1)[1] for line in lines if "error parsing grammar:" in line]
        said = said or [line for line in lines if "grammar" in line.lower()]
        reason = said[-1].strip().rstrip(".") if said else "no reason given"
        raise InvalidRequest(f"llama.cpp cannot use this grammar: {reason}.")
    return sampler


class Sampler:
    def __init__(self, ctx, n_vocab: int, options: SamplingOptions, history: list[int] | None = None, vocab=None):
        """vocab: the model's (Runtime.vocab), needed for a grammar."""
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.options = options
        self.fast_greedy = (options.greedy and not options.penalized and not options.logit_bias
                            and not options.grammar)
        self._views: dict[int, np.ndarray] = {}
        self.chain = None
        self.seed = options.seed if options.seed >= 0 else random.getrandbits(31)
        if not self.fast_greedy:
            # First, so that a grammar llama.cpp refuses costs nothing to clean up.
            grammar = grammar_sampler(vocab, options.grammar) if options.grammar else None
            self.chain = self._build_chain(options)
            # The repeat penalty looks at recent tokens, the prompt's included.
            for tok in (history or [])[-max(options.repeat_last_n, 0):]:
                llama_cpp.llama_sampler_accept(self.chain, tok)
            if grammar is not None:
                # The grammar goes in front, in a chain of its own around the rest: it must see only the
                # answer's tokens, never the prompt's that the penalties were just given.
                outer = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
                llama_cpp.llama_sampler_chain_add(outer, grammar)
                llama_cpp.llama_sampler_chain_add(outer, self.chain)
                self.chain = outer

    def _build_chain(self, o: SamplingOptions):
        params = llama_cpp.llama_sampler_chain_default_params()
        chain = llama_cpp.llama_sampler_chain_init(params)
        add = llama_cpp.llama_sampler_chain_add
        if o.logit_bias:
            biases = (llama_cpp.llama_logit_bias * len(o.logit_bias))(
                *(llama_cpp.llama_logit_bias(t, b) for t, b in o.logit_bias.items() if 0 <= t < self.n_vocab))
            add(chain, llama_cpp.llama_sampler_init_logit_bias(self.n_vocab, len(biases), biases))
        if o.penalized and o.repeat_last_n != 0:
            add(chain, llama_cpp.llama_sampler_init_penalties(self.n_vocab, o.repeat_last_n, o.repeat_penalty,
                                                              o.frequency_penalty, o.presence_penalty))
        if o.greedy:
            add(chain, llama_cpp.llama_sampler_init_greedy())
            return chain
        if o.top_k > 0:
            add(chain, llama_cpp.llama_sampler_init_top_k(int(o.top_k)))
        if 0.0 < o.top_p < 1.0:
            add(chain, llama_cpp.llama_sampler_init_top_p(float(o.top_p), 1))
        if o.min_p > 0.0:
            add(chain, llama_cpp.llama_sampler_init_min_p(float(o.min_p), 1))
        add(chain, llama_cpp.llama_sampler_init_temp(float(o.temperature)))
        add(chain, llama_cpp.llama_sampler_init_dist(self.seed))
        return chain

    def logits(self, idx: int = -1) -> np.ndarray:
        # The row's address is stable from token to token, so the numpy view is built only
        # when it moves: np.ctypeslib.as_array costs about 50 us, a token ~5 ms on small models.
        addr = _logits_address(self.ctx, idx)
        view = self._views.get(addr)
        if view is None:
            if len(self._views) > 64:
                self._views.clear()
            view = self._views[addr] = np.ctypeslib.as_array((ctypes.c_float * self.n_vocab).from_address(addr))
        return view

    def sample(self, idx: int = -1) -> int:
        if self.fast_greedy:
            return int(self.logits(idx).argmax())
        return llama_cpp.llama_sampler_sample(self.chain, self.ctx, idx)

    def accept(self, token: int) -> None:
        """Tell the chain about a token chosen elsewhere (speculative verification)."""
        if self.chain is not None:
            llama_cpp.llama_sampler_accept(self.chain, token)

    def close(self) -> None:
        if self.chain is not None:
            llama_cpp.llama_sampler_free(self.chain)
            self.chain = None

    def __del__(self):  # pragma: no cover
        self.close()


