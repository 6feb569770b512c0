"""A prompt the engine may cut to fit its context (the window, hearth chat, /v1/responses with truncation "auto") is
cut from what its bytes alone say before any of it is rendered or tokenized: the part that could never be kept costs
nothing (issue 56 B7: a 9 MB input took 44.8 s and 1.3 GB of the engine to keep its last thousand tokens; here 11.5
s and a peak of 1,385 MB through hearth serve, and a plain request sent 1 s later waited 10.6 s behind it; now
6.2 s, 236 MB and 5.3 s, most of it the kept context's evaluation on one thread)."""

from __future__ import annotations

import os
import time

import pytest

from app.protocol.messages import DONE, LoadOptions, SamplingOptions

CTX = 512
HUGE = "a" * 9_000_000  # one 9 MB word: the shape that cost the most to tokenize whole
GREEDY = SamplingOptions(max_tokens=2, temperature=0.0)


def peak_rss(pid: int) -> int:
    """The engine process's peak resident memory so far (Linux's VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("VmHWM")).split()[1]) * 1024


def last(events) -> dict:
    done = None
    for ev in events:
        if ev["ev"] == DONE:
            done = ev
    assert done is not None
    return done


def ask(engine, how: str, text: str) -> tuple[dict, float]:
    """(the Done event, seconds) of a request whose last text is `text`, cut to fit."""
    started = time.monotonic()
    if how == "chat":
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "An earlier turn."},
                    {"role": "assistant", "content": "Noted."}, {"role": "user", "content": text}]
        done = last(engine.chat(messages, GREEDY))
    else:
        done = last(engine.complete(text, GREEDY))
    return done, time.monotonic() - started


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak memory from /proc")
@pytest.mark.heavy  # slow by design (two 9 MB prompts and their reference): the heavy tier, which CI runs after the suite
@pytest.mark.parametrize("how", ["chat", "complete"])
def test_a_prompt_cut_to_fit_costs_what_is_kept_not_what_is_sent(engine, bundled_model, how):
    engine.load(LoadOptions(model_path=str(bundled_model), n_ctx=CTX, n_threads=1))
    # What a prompt that fills the context costs here (it is cut too, from a few pages of text): the reference.
    _, reference = ask(engine, how, "b" * 40_000)
    before = peak_rss(engine.pid)
    done, took = ask(engine, how, HUGE)
    grew = peak_rss(engine.pid) - before
    assert done["prompt_tokens"] <= CTX, done
    # Before: 9.6-11.6 s here (the reference 1.6-2.0 s) and a peak 68-85 MB higher, from tokenizing all 9 MB to keep
    # its last 500 tokens; now 1.7-1.8 s and +31-33 MB: the 9 MB text itself is what the engine holds.
    assert grew < 55 * 2**20, f"the engine's peak grew by {grew / 2**20:.0f} MB"
    assert took < reference + 4, f"{took:.1f} s, where a prompt that only fills the context took {reference:.1f} s"
