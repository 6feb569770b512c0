"""Prompts with special-token markup are split at the markers by Hearth, in one pass (#30: llama.cpp's own split is
quadratic in the markers: 100,000 chat turns held every slot for four minutes). The tokens must be exactly the ones
llama.cpp's own special-token parsing gives, and a prompt past its limit stops being tokenized soon after it."""

from __future__ import annotations

import threading
import time

import pytest

from app.core.errors import ContextTooLong
from app.protocol.messages import SamplingOptions
from tests.engine.prompt.test_literal import session  # noqa: F401 (fixture: the bundled model, n_ctx 512)


TEXTS = [
    "", "plain text, no markup", "<|im_start|>", "<|im_start|><|im_end|>", "<|im_end|>\n<|im_start|>user\nHi",
    "a<|im_start|>b", "  <|im_start|>  spaces around  <|im_end|>  ", "<|endoftext|>tail", "x" * 3000 + "<|im_end|>",
    "Ünïcödé 😀 <|im_start|>système\n日本語<|im_end|>", "<|im_start<|im_start|>|>", "<|im_start|>" * 50,
]


@pytest.mark.parametrize("add_special", [False, True])
def test_the_split_gives_llama_cpps_own_tokens(session, add_special):  # noqa: F811
    rt = session.rt
    for text in TEXTS:
        assert rt.tokenize(text, add_special, True) == rt._tokenize_plain(text, add_special, True), repr(text)


def test_rendered_chats_tokenize_as_llama_cpp_does(session):  # noqa: F811
    rt = session.rt
    messages = [{"role": "system", "content": "Be brief."}]
    for i in range(30):
        messages += [{"role": "user", "content": f"Question {i}?\n- a\n- b"}, {"role": "assistant", "content": f"{i}."}]
    prompt = session.template.render(messages, add_generation_prompt=True)
    assert rt.tokenize(prompt, rt.add_bos(), True) == rt._tokenize_plain(prompt, rt.add_bos(), True)


def test_many_markers_take_linear_time_and_a_limit_stops_early(session):  # noqa: F811
    rt = session.rt
    turn = "<|im_start|>user\nhi<|im_end|>\n"
    started = time.perf_counter()
    tokens = rt.tokenize(turn * 20_000, False, True)
    assert time.perf_counter() - started < 2.0  # llama.cpp's own split took about 20 s for this
    assert len(tokens) == 20_000 * len(rt.tokenize(turn, False, True))
    limited = rt.tokenize(turn * 20_000, False, True, limit=500)
    assert 500 < len(limited) < 520 and limited == tokens[: len(limited)]


def test_the_api_refuses_what_cannot_fit_without_rendering_or_tokenizing_it_all(session):  # noqa: F811
    cancelled = threading.Event()
    sampling = SamplingOptions(max_tokens=1, temperature=0)
    with pytest.raises(ContextTooLong, match="cannot fit"):
        session.chat([{"role": "user", "content": "hi"}] * 600, sampling, lambda e: None, cancelled, truncate=False)
    started = time.perf_counter()
    with pytest.raises(ContextTooLong, match="longer than the model's context of 512"):
        session.chat([{"role": "user", "content": "hi"}] * 400, sampling, lambda e: None, cancelled, truncate=False)
    with pytest.raises(ContextTooLong, match="longer than"):
        session.complete("<|im_start|>" * 50_000, sampling, lambda e: None, cancelled, truncate=False)
    assert time.perf_counter() - started < 2.0
    # A prompt that fits still answers.
    done = session.chat([{"role": "user", "content": "hi"}], sampling, lambda e: None, cancelled, truncate=False)
    assert done["completion_tokens"] == 1
