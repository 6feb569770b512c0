"""Sampling under a llama.cpp grammar (structured output, tool calls).

Running the grammar over the whole vocabulary costs more than the rest of a token on a small model (measured
on the bundled SmolLM2, 49k tokens: 27 ms a token instead of 16). So, as llama.cpp's own sampler
(common/sampling.cpp) does, the chain picks a token as if there were no grammar, the grammar checks only that
token, and only when it refuses is the whole vocabulary filtered and the choice made again. The answer follows
the grammar either way; the chain sees the same candidates it would have seen.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from app.core.errors import GenerationError, InvalidRequest
from app.engine.process import llamalog
from app.protocol.gbnf import MAX_GRAMMAR_CHARS, MAX_GRAMMAR_DEPTH
from app.protocol.grammar_ambiguity import ambiguity_problem

_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])  # llama_token_data


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
    # Every client's grammar (the window's, the CLI's, a remote caller's), before llama.cpp follows it: one too
    # ambiguous holds the whole engine, every slot, on one token.
    problem = ambiguity_problem(grammar)
    if problem:
        raise InvalidRequest(f"This grammar cannot be enforced in reasonable time: {problem}.")
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


class GrammarSampling:
    """One answer's grammar state, and the token choice under it (see the module's docstring)."""

    def __init__(self, vocab, grammar: str, n_vocab: int):
        self.sampler = None  # (for close(), should the grammar be refused)
        self.sampler = grammar_sampler(vocab, grammar)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._all, self._all_array = _candidates(n_vocab)
        self._one, self._one_array = _candidates(1)

    def sample(self, chain, logits: np.ndarray) -> int:
        """The token the chain picks from these logits under the grammar; the chain and grammar accept it."""
        token, _ = self._pick(chain, logits, grammar_first=False)
        if not self._allows(token):
            token, logit = self._pick(chain, logits, grammar_first=True)
            if not np.isfinite(logit):  # accepting a token the grammar refuses would abort the engine
                # The request's grammar (or schema) is the cause, not the engine: the API's 400.
                raise InvalidRequest("The grammar allows no token at this point of the answer: no token of this "
                                     "model's vocabulary can continue it (a grammar that wants a character no "
                                     "token has, such as a NUL).")
        llama_cpp.llama_sampler_accept(chain, token)
        self.accept(token)
        return token

    def _pick(self, chain, logits: np.ndarray, grammar_first: bool) -> tuple[int, float]:
        c, array = self._all, self._all_array
        c["id"] = self._ids  # the chain sorts and cuts the candidates in place: refill them each time
        c["logit"] = logits
        c["p"] = 0.0
        array.size, array.selected, array.sorted = len(c), -1, False
        if grammar_first:
            llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(array))
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(array))
        if not 0 <= array.selected < array.size:
            raise GenerationError("llama.cpp's sampler chain chose no token.")
        return int(c["id"][array.selected]), float(c["logit"][array.selected])

    def _allows(self, token: int) -> bool:
        one, array = self._one, self._one_array
        one[0] = (token, 1.0, 0.0)
        array.size, array.selected, array.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(array))
        return bool(np.isfinite(one["logit"][0]))

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self.sampler, token)

    def close(self) -> None:
        if self.sampler is not None:
            llama_cpp.llama_sampler_free(self.sampler)
            self.sampler = None

    def __del__(self):  # pragma: no cover
        self.close()


def _candidates(n: int) -> tuple[np.ndarray, llama_cpp.llama_token_data_array]:
    """n candidates in a numpy buffer, and the llama_token_data_array that points at it."""
    buffer = np.zeros(n, dtype=_TOKEN_DATA)
    array = llama_cpp.llama_token_data_array(
        data=ctypes.cast(buffer.ctypes.data, llama_cpp.llama_token_data_p), size=n, selected=-1, sorted=False)
    return buffer, array
