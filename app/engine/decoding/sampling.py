"""Build llama.cpp's C sampler chain from SamplingOptions.

Greedy decoding without a repeat penalty skips the chain and takes the argmax
of the logits directly: the chain copies and sorts the whole vocabulary each
token, which on a small model is a measurable share of a token's time.

A grammar (structured output, tool calls) is llama.cpp's grammar sampler,
checked against the chain's choice (app/engine/decoding/grammar.py); it needs the
chain, so it turns the argmax path off.
"""

from __future__ import annotations

import ctypes
import random

import llama_cpp
import numpy as np

from app.core.errors import InvalidRequest
from app.protocol import step_clock
from app.engine.decoding.grammar import GrammarSampling
from app.protocol.messages import SamplingOptions

# llama_get_logits_ith returning a plain address (llama_cpp's binding returns a float
# pointer object, slower to turn into an array); a separate prototype leaves theirs as is.
_logits_address = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
    ("llama_get_logits_ith", llama_cpp.llama_cpp._lib))


def check_logit_bias(options: SamplingOptions, n_vocab: int) -> None:
    """InvalidRequest naming the first biased token this model's vocabulary does not have: a bias is refused, as
    any other wrong field is, never left out without a word."""
    outside = next((token for token in options.logit_bias if not 0 <= token < n_vocab), None)
    if outside is not None:
        raise InvalidRequest(f"'logit_bias' key {outside} is not a token of this model, whose vocabulary has "
                             f"{n_vocab} tokens (0-{n_vocab - 1}).")


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
        self.grammar = None
        if not self.fast_greedy:
            # First, so that a grammar llama.cpp refuses costs nothing to clean up.
            self.grammar = GrammarSampling(vocab, options.grammar, n_vocab) if options.grammar else None
            self.chain = self._build_chain(options)
            # The repeat penalty looks at recent tokens, the prompt's included (the grammar sees only the answer's).
            # (An image's or a sound's positions are placeholders, negative ids: no token to penalise.)
            for tok in (history or [])[-max(options.repeat_last_n, 0):]:
                if tok >= 0:
                    llama_cpp.llama_sampler_accept(self.chain, tok)

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
        # A token's step starts here (a grammar can take for ever to sample; app/protocol/step_clock.py).
        step_clock.mark(1)
        if self.fast_greedy:
            return int(self.logits(idx).argmax())
        if self.grammar is not None:
            return self.grammar.sample(self.chain, self.logits(idx))
        return llama_cpp.llama_sampler_sample(self.chain, self.ctx, idx)

    def accept(self, token: int) -> None:
        """Tell the chain (and the grammar) about a token chosen elsewhere."""
        if self.chain is not None:
            llama_cpp.llama_sampler_accept(self.chain, token)
        if self.grammar is not None:
            self.grammar.accept(token)

    def close(self) -> None:
        if self.chain is not None:
            llama_cpp.llama_sampler_free(self.chain)
            self.chain = None
        if self.grammar is not None:
            self.grammar.close()
            self.grammar = None

    def __del__(self):  # pragma: no cover
        self.close()


