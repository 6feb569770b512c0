"""A prompt that cannot fit the context is refused in a moment, against a real `hearth serve`: a 10 MB
one-word prompt (the worst case for a BPE tokenizer: one pre-token) is a 400 context_length_exceeded in well
under a second of the engine's time, on every endpoint that reads a prompt, and a plain request sent while
it is refused is answered at once (issue 48: 8-13 s to refuse it, and 7.5 s for the request behind it).
app/engine/decoding/token_bound.py knows it from the bytes alone: no token spells more than the vocabulary's
longest piece."""

from __future__ import annotations

import threading
import time

import anthropic
import pytest
from openai import BadRequestError, OpenAI

from tests.server.conftest import CTX, KEY

pytestmark = pytest.mark.slow

WORD = "a" * 10_000_000
# Sending and parsing 10 MB of JSON, twice (server, then engine), on a loaded 2-core machine: generous.
REFUSED_WITHIN_S = 6


@pytest.fixture
def oai(api):
    return OpenAI(base_url=api, api_key=KEY, max_retries=0, timeout=120)


def refused(call) -> float:
    started = time.monotonic()
    with pytest.raises((BadRequestError, anthropic.BadRequestError)) as caught:
        call()
    took = time.monotonic() - started
    assert caught.value.status_code == 400
    assert "longer than" in str(caught.value), caught.value
    if isinstance(caught.value, BadRequestError):
        assert caught.value.code == "context_length_exceeded", caught.value
    return took


def test_a_10_mb_one_word_prompt_is_refused_at_once_on_every_endpoint(oai, api, model_name):
    claude = anthropic.Anthropic(base_url=api.removesuffix("/v1"), api_key=KEY, max_retries=0, timeout=120)
    calls = {
        "completions": lambda: oai.completions.create(model=model_name, prompt=WORD, max_tokens=3),
        "chat": lambda: oai.chat.completions.create(model=model_name, max_tokens=3,
                                                    messages=[{"role": "user", "content": WORD}]),
        "messages": lambda: claude.messages.create(model=model_name, max_tokens=3,
                                                   messages=[{"role": "user", "content": WORD}]),
        "count_tokens": lambda: claude.messages.count_tokens(model=model_name,
                                                             messages=[{"role": "user", "content": WORD}]),
        "embeddings": lambda: oai.embeddings.create(model=model_name, input=WORD),
    }
    took = {name: refused(call) for name, call in calls.items()}
    assert all(t < REFUSED_WITHIN_S for t in took.values()), took


def test_a_plain_request_sent_while_it_is_refused_is_answered_at_once(oai, model_name):
    huge = threading.Thread(target=lambda: refused(lambda: oai.completions.create(model=model_name, prompt=WORD,
                                                                                  max_tokens=3)))
    huge.start()
    time.sleep(1.0)
    started = time.monotonic()
    answer = oai.chat.completions.create(model=model_name, max_tokens=3, messages=[{"role": "user", "content": "Hi"}])
    took = time.monotonic() - started
    huge.join(60)
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert took < REFUSED_WITHIN_S, took


def test_a_prompt_just_past_the_context_is_still_counted_and_refused(oai, model_name):
    """Below the bytes-alone bound the prompt is tokenized as before: the refusal says how long it is."""
    prompt = " hello" * (CTX + 10)  # more tokens than the context, few enough bytes to be counted
    with pytest.raises(BadRequestError) as caught:
        oai.completions.create(model=model_name, prompt=prompt, max_tokens=3)
    assert "context" in str(caught.value)
