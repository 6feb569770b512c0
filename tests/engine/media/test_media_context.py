"""The context policies keep or drop an image whole, never half of one: the StreamingLLM window (a cache that
shifts: Gemma 3) and h2o drop a whole medium or none of it; truncate-middle (Qwen2-VL's M-RoPE cache cannot shift)
drops the recent part up to the end of its last medium, since a medium cannot be evaluated again from the
history. An image that cannot fit the context is refused before anything is evaluated."""

from __future__ import annotations

import threading

import pytest

from app.core.errors import ContextTooLong
from app.engine.context.window import media_runs
from app.engine.decoding.runtime import Runtime
from app.engine.process.session import Session
from app.protocol.messages import LoadOptions, SamplingOptions
from tests.engine.media.test_media_greedy import question

MEDIUM_POSITIONS = {"gemma3": 16, "qwen2vl": 5}  # a 128-pixel image: Gemma's 16 tokens, Qwen2-VL's 5x5 grid


def run_long(made, policy: str, n_ctx: int, n: int, **options) -> tuple[Session, dict]:
    session = Session(Runtime(LoadOptions(model_path=str(made.model), n_ctx=n_ctx, n_threads=2,
                                          context_policy=policy, **options), extra_bufts=False), None)
    family = made.family
    done = session.chat([question(family, 1)], SamplingOptions(temperature=0.0, max_tokens=n, ignore_eos=True),
                        lambda event: None, threading.Event())
    return session, done


def whole(tokens: list[int], family: str) -> bool:
    return all(b - a == MEDIUM_POSITIONS[family] for a, b in media_runs(tokens))


@pytest.mark.parametrize("family,policy", [("gemma3", "window"), ("gemma3", "h2o"), ("qwen2vl", "window")])
def test_a_full_context_drops_an_image_whole_or_keeps_it_whole(tiny_media, family, policy):
    made = tiny_media[family]
    session, done = run_long(made, policy, n_ctx=256, n=400)
    try:
        assert done["finish_reason"] == "length" and done["completion_tokens"] == 400
        window = done["window"]
        assert window["dropped"] > 0
        assert whole(session.decoder.tokens, family)
        if family == "qwen2vl":  # truncate-middle: the image could not be evaluated again, so it went
            assert window["policy"] == "truncate-middle"
            assert media_runs(session.decoder.tokens) == []
    finally:
        session.close()


def test_an_image_that_cannot_fit_is_refused_before_anything_is_evaluated(tiny_media):
    made = tiny_media["gemma3"]
    session = Session(Runtime(LoadOptions(model_path=str(made.model), n_ctx=256, n_threads=2), extra_bufts=False),
                      None)
    try:
        long_question = " ".join(["Describe every part of this picture in great detail."] * 30)
        with pytest.raises(ContextTooLong, match=r"with 1 image is \d+ tokens \(16 of them for the 1 image\), more "
                                                 r"than the model's context of 256"):
            session.chat([question("gemma3", 1, long_question)], SamplingOptions(temperature=0.0, max_tokens=4),
                         lambda event: None, threading.Event())
        assert session.decoder.tokens == []  # nothing was evaluated
    finally:
        session.close()
