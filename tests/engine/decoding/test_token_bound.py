"""The fewest tokens a text can be, from its bytes alone (app/engine/decoding/token_bound.py): never more than
the tokens llama.cpp really makes of it, on texts of every kind, and enough to refuse a prompt far past the
context before tokenizing it."""

from __future__ import annotations

import random
import time

import pytest

from app.core.errors import ContextTooLong
from app.protocol.messages import SamplingOptions
from tests.engine.decoding.test_tokenize import TEXTS
from tests.engine.prompt.test_literal import session  # noqa: F401 (fixture: the bundled model, n_ctx 512)


def texts() -> list[str]:
    rng = random.Random(48)
    made = [t for t in TEXTS if t]
    made += [" " * 5000, "\n" * 3000, "a" * 20000, "😀" * 2000, "<|im_start|>" * 300, "\t \n" * 1000,
             "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(3000)),
             bytes(rng.randrange(256) for _ in range(3000)).decode("utf-8", "replace"),
             " ".join(rng.choice(["the", "lighthouse", "keeper", "12345", "::", "  "]) for _ in range(3000))]
    return made


@pytest.mark.parametrize("parse_special", [False, True])
def test_the_bound_is_never_more_than_the_real_count(session, parse_special):  # noqa: F811
    rt = session.rt
    assert rt._bound.longest_piece() > 0  # a byte-level BPE vocabulary: the bound applies
    for text in texts():
        real = len(rt._tokenize_plain(text, False, parse_special))
        assert rt._bound.fewest(text) <= real, (text[:40], rt._bound.fewest(text), real)


def test_a_10_mb_prompt_is_refused_before_any_tokenizing(session):  # noqa: F811
    rt = session.rt
    prompt = "a" * 10_000_000
    started = time.perf_counter()
    assert rt.surely_longer(prompt, rt.n_ctx)
    with pytest.raises(ContextTooLong, match="longer than the model's context"):
        session.decoder.generate(prompt, SamplingOptions(max_tokens=3), lambda event: None, truncate=False)
    assert time.perf_counter() - started < 2.0  # tokenizing it took 8-13 s


def test_a_short_text_is_never_surely_longer(session):  # noqa: F811
    rt = session.rt
    assert not rt.surely_longer("a" * rt.n_ctx, rt.n_ctx)
    assert not rt.surely_longer("hello " * 10, 5)  # it may be, but only tokenizing can tell
