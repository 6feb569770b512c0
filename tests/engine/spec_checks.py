"""What the speculative tests check on every drafter: an answer generated with it, and that it equals plain
decoding's or differs only at a near-tie."""

from __future__ import annotations

import llama_cpp
import numpy as np

from app.engine.decoding.decode import Decoder
from app.engine.speculation.prediction import prediction_speculator
from app.protocol.messages import SamplingOptions
from app.engine.speculation.speculative import Speculator

N_TOKENS = 48
# A function the speculative tests ask the model to repeat: an answer that copies its input.
CODE = '''def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    total = 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        if index >= window - 1:
            averages.append(total / window)
    return averages
'''


def generate(dec: Decoder, prompt: str, speculator, sampling: SamplingOptions | None = None,
             max_tokens: int = N_TOKENS):
    """A fresh greedy answer of max_tokens (or as `sampling` says): (KV tokens afterwards, Done, all events)."""
    dec.reset()
    events: list[dict] = []
    done = dec.generate(prompt, sampling or SamplingOptions(temperature=0.0, repeat_penalty=1.0, max_tokens=max_tokens,
                                                             ignore_eos=True), events.append, speculator=speculator)
    events.append(done)
    return list(dec.tokens), done, events


def last_logits(rt, dec: Decoder, tokens: list[int], chunk: int) -> np.ndarray:
    dec.reset()
    for start in range(0, len(tokens), chunk):
        dec.eval_tokens(tokens[start : start + chunk])
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(rt.ctx, -1), shape=(rt.n_vocab,)).copy()


def assert_same_or_near_tie(rt, dec: Decoder, plain: list[int], spec: list[int]) -> None:
    """Equal, or at the first difference the two answers' tokens are the target's best two, and their gap
    is within what evaluating in other batch sizes moves them (speculation verifies in batches; llama.cpp's
    batched and single-token kernels round differently, by a different amount on each CPU)."""
    assert len(plain) == len(spec)
    i = next((j for j, (a, b) in enumerate(zip(plain, spec)) if a != b), None)
    if i is None:
        return
    batched = last_logits(rt, dec, plain[:i], len(plain))
    stepped = last_logits(rt, dec, plain[:i], 1)
    best2 = np.argsort(batched)[-2:]
    top, second = batched[best2[1]], batched[best2[0]]
    assert {plain[i], spec[i]} == set(best2.tolist()), f"position {i}: the outputs disagree beyond a tie"
    # The kernels' rounding at these two tokens, measured here: the gap may be up to both moving apart.
    noise = float(np.abs(batched[best2] - stepped[best2]).max())
    assert abs(top - second) <= max(2 * noise, 1e-3 * abs(top)), (
        f"position {i}: {top} vs {second} is no near-tie (batch sizes moved them by {noise:.4f})")


def set_costs(spec: Speculator, cost) -> None:
    for n in range(1, len(spec.costs.t)):
        spec.costs.t[n] = cost(n)
    spec.plain_reason = spec._why_plain()


def predicted(dec: Decoder, text: str) -> Speculator:
    """A prediction's speculator with verify batches as cheap as on a GPU, so that drafting pays whatever this
    CPU's batched kernels cost (the decisions from real costs are tests/engine/test_speculative.py's)."""
    spec = prediction_speculator(dec, text)
    set_costs(spec, lambda n: spec.costs.t[1] * (1 + 0.02 * (n - 1)))
    return spec
