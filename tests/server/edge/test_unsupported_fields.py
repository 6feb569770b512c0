"""A field the server cannot honour is a 400 naming it, never silently ignored (the README promises it;
issue 48 found best_of, suffix and a negative thinking budget answered 200), through the official clients
against a real `hearth serve`. Their neutral values are taken."""

from __future__ import annotations

import anthropic
import pytest
from openai import BadRequestError

from tests.server.conftest import KEY

pytestmark = pytest.mark.slow

HI = [{"role": "user", "content": "Hi"}]
FUNCTION = {"name": "f", "parameters": {"type": "object", "properties": {}}}


@pytest.fixture
def claude(api):
    return anthropic.Anthropic(base_url=api.removesuffix("/v1"), api_key=KEY, max_retries=0, timeout=120)


@pytest.mark.parametrize("extra, field", [
    ({"best_of": 3}, "best_of"), ({"best_of": True}, "best_of"), ({"suffix": " and the end."}, "suffix")])
def test_completions_refuse_what_they_cannot_do(oai, model_name, extra, field):
    with pytest.raises(BadRequestError) as caught:
        oai.completions.create(model=model_name, prompt="Once", max_tokens=3, **extra)
    assert caught.value.param == field and f"'{field}'" in caught.value.message, caught.value


@pytest.mark.parametrize("extra, field", [
    ({"functions": [FUNCTION]}, "functions"), ({"function_call": {"name": "f"}}, "function_call"),
    ({"modalities": ["text", "audio"]}, "modalities"), ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"web_search_options": {}}, "web_search_options")])
def test_chat_refuses_what_it_cannot_do(oai, model_name, extra, field):
    with pytest.raises(BadRequestError) as caught:
        oai.chat.completions.create(model=model_name, messages=HI, max_tokens=3, extra_body=extra)
    assert caught.value.param == field and f"'{field}'" in caught.value.message, caught.value


def test_neutral_values_are_taken(oai, model_name):
    done = oai.completions.create(model=model_name, prompt="Once", max_tokens=3, best_of=1, suffix="")
    assert done.choices[0].text is not None
    done = oai.chat.completions.create(model=model_name, messages=HI, max_tokens=3, modalities=["text"])
    assert done.choices[0].message.content is not None


@pytest.mark.parametrize("thinking, max_tokens", [
    ({"type": "enabled", "budget_tokens": -5}, 2000), ({"type": "enabled", "budget_tokens": 1024.5}, 2000),
    ({"type": "enabled"}, 2000), ({"type": "enabled", "budget_tokens": 4096}, 2000),
    ({"type": "sometimes"}, 2000), ({"type": "disabled", "budget_tokens": 2048}, 2000)])
def test_a_wrong_thinking_setting_is_a_400_naming_it(claude, model_name, thinking, max_tokens):
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model=model_name, max_tokens=max_tokens, messages=HI, thinking=thinking)
    assert "'thinking" in caught.value.message, caught.value


def test_a_valid_thinking_setting_is_taken_as_a_hint(claude, model_name):
    answer = claude.messages.create(model=model_name, max_tokens=1100, messages=HI, stop_sequences=["."],
                                    thinking={"type": "enabled", "budget_tokens": 1024})
    assert answer.stop_reason in ("end_turn", "max_tokens", "stop_sequence")
    count = claude.messages.count_tokens(model=model_name, messages=HI,
                                         thinking={"type": "enabled", "budget_tokens": 1024})
    assert count.input_tokens > 0


def test_mcp_servers_are_refused(claude, model_name):
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model=model_name, max_tokens=3, messages=HI,
                               extra_body={"mcp_servers": [{"type": "url", "url": "http://127.0.0.1:9/mcp",
                                                            "name": "x"}]})
    assert "'mcp_servers'" in caught.value.message
