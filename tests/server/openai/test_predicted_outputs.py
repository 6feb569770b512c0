"""OpenAI's predicted outputs through `hearth serve`, with the official client: the prediction drafts, usage says
how much of it was accepted, and a malformed prediction is a 400 that names the field."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import KEY

pytestmark = pytest.mark.slow

FUNCTION = '''def greet(name):
    message = "Hello, " + name + "!"
    print(message)
    return message
'''
ASK = [{"role": "user", "content": "Repeat this Python function exactly:\n\n" + FUNCTION}]


def test_regenerating_with_the_previous_answer_as_prediction_accepts_it(oai, model_name):
    # Twice, so that both answers compared evaluate their cached prompt's last token alone: the same batches.
    for _ in range(2):
        first = oai.chat.completions.create(model=model_name, messages=ASK, temperature=0, max_tokens=60)
    previous = first.choices[0].message.content
    assert first.usage.completion_tokens_details.accepted_prediction_tokens == 0  # no prediction, nothing drafted
    again = oai.chat.completions.create(model=model_name, messages=ASK, temperature=0, max_tokens=60,
                                        prediction={"type": "content", "content": previous})
    details = again.usage.completion_tokens_details
    assert details.accepted_prediction_tokens >= 0.7 * again.usage.completion_tokens
    assert details.rejected_prediction_tokens <= details.accepted_prediction_tokens
    assert again.choices[0].finish_reason == first.choices[0].finish_reason
    # Text parts are a prediction too, and streaming reports the same usage in its last chunk.
    chunks = list(oai.chat.completions.create(
        model=model_name, messages=ASK, temperature=0, max_tokens=60, stream=True,
        stream_options={"include_usage": True},
        prediction={"type": "content", "content": [{"type": "text", "text": previous}]}))
    assert chunks[-1].usage.completion_tokens_details.accepted_prediction_tokens > 0


def test_a_malformed_prediction_is_a_400_naming_it(api, model_name):
    for bad in ({"type": "text", "content": "x"}, "just text", {"type": "content", "content": 5}):
        r = httpx.post(f"{api}/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                       json={"model": model_name, "messages": ASK, "max_tokens": 4, "prediction": bad})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"].startswith("prediction") and "prediction" in error["message"]
