"""The wire-format gaps real clients hit (#30), through the official OpenAI client on the shared server:
models.retrieve, fields this server cannot honour refused with a 400 that says so (never ignored), a grammar
with no way on as the client's error, a tool call cut off by max_tokens coming back as text (never markup,
never nothing), and a conversation that ends with the assistant's words continuing them."""

from __future__ import annotations

import json

import httpx
import pytest
from openai import BadRequestError, NotFoundError

from tests.server.conftest import KEY

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                   "properties": {"city": {"type": "string", "maxLength": 30}}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
AFTER_THE_CALL = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees Celsius."}]


def test_a_model_is_retrieved_by_its_id(oai, model_name):
    model = oai.models.retrieve(model_name)
    assert model.id == model_name and model.object == "model"
    assert model.model_dump() == next(m for m in oai.models.list().model_dump()["data"] if m["id"] == model_name)
    with pytest.raises(NotFoundError) as err:
        oai.models.retrieve("no-such-model")
    assert err.value.body["code"] == "model_not_found"


@pytest.mark.parametrize("fields", [{"logprobs": True}, {"logprobs": True, "top_logprobs": 3}, {"top_logprobs": 2}])
def test_chat_logprobs_are_refused_not_ignored(oai, model_name, fields):
    with pytest.raises(BadRequestError) as err:
        oai.chat.completions.create(model=model_name, messages=ASK, max_tokens=2, **fields)
    assert err.value.body["code"] == "logprobs_not_supported" and "log probabilities" in err.value.body["message"]
    # Saying no is fine.
    r = oai.chat.completions.create(model=model_name, messages=ASK, max_tokens=1, logprobs=False)
    assert r.choices[0].logprobs is None


def test_completions_refuse_logprobs_and_say_the_prompt_limit(oai, model_name):
    with pytest.raises(BadRequestError) as err:
        oai.completions.create(model=model_name, prompt="Once upon", max_tokens=2, logprobs=2)
    assert err.value.body["code"] == "logprobs_not_supported"
    with pytest.raises(BadRequestError) as err:
        oai.completions.create(model=model_name, prompt=["Once upon", "A long time"], max_tokens=2)
    assert err.value.body["param"] == "prompt" and "it has 2" in err.value.body["message"]
    assert oai.completions.create(model=model_name, prompt=["Once upon"], max_tokens=2).choices[0].text


def test_logit_bias_over_1024_tokens_says_the_count_limit(oai, model_name):
    with pytest.raises(BadRequestError) as err:
        oai.chat.completions.create(model=model_name, messages=ASK, max_tokens=1,
                                    logit_bias={str(i): 1 for i in range(1025)})
    assert "at most 1024 tokens" in err.value.body["message"] and "1025" in err.value.body["message"]
    oai.chat.completions.create(model=model_name, messages=ASK, max_tokens=1, logit_bias={str(i): 1 for i in range(1024)})


@pytest.mark.parametrize("key", ["99999999999999999999", "99999999", "49152"])  # the vocabulary has 49,152
def test_a_logit_bias_key_past_the_vocabulary_is_a_400_naming_it(oai, model_name, key):
    """Issue 56 D16: a 200, the key left out without a word."""
    for ask in (lambda: oai.chat.completions.create(model=model_name, messages=ASK, max_tokens=1,
                                                    logit_bias={key: 5}),
                lambda: oai.completions.create(model=model_name, prompt="Once upon", max_tokens=1,
                                               logit_bias={key: 5})):
        with pytest.raises(BadRequestError) as err:
            ask()
        message = err.value.body["message"]
        assert "'logit_bias'" in message and key in message, message


@pytest.mark.parametrize("grammar", [r"root ::= [\x00]", r'root ::= "a" [\x00]'])  # at once, and after a token
def test_a_grammar_that_allows_no_token_is_the_clients_error(api, oai, model_name, grammar):
    with pytest.raises(BadRequestError) as err:
        oai.chat.completions.create(model=model_name, messages=ASK, max_tokens=4, extra_body={"grammar": grammar})
    assert "allows no token" in err.value.body["message"]
    assert oai.chat.completions.create(model=model_name, messages=ASK, max_tokens=1).choices[0].message.content


def check_text_not_markup(content: str | None) -> None:
    assert content, "the generated tokens were dropped"
    assert "<tool_call>" not in content and "</tool_call>" not in content and not content.startswith("<"), content


def test_a_tool_call_cut_off_by_max_tokens_comes_back_as_text(oai, model_name):
    # "required": the answer starts a call at once, and 16 tokens cannot finish it (12 reached '{ "name": "g' once
    # the tools were described as signatures, #54.5: the grammar lets the model space its JSON as it likes).
    r = oai.chat.completions.create(model=model_name, messages=ASK, tools=[WEATHER], tool_choice="required",
                                    max_tokens=16, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    check_text_not_markup(choice.message.content)
    assert '"get_' in choice.message.content  # what the model wrote of the call
    chunks = list(oai.chat.completions.create(model=model_name, messages=ASK, tools=[WEATHER], stream=True,
                                              tool_choice="required", max_tokens=16, temperature=0))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == choice.message.content
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    # Cut off right after its opening tag (6 tokens here), a call has nothing but markup: no text, and no markup.
    r = oai.chat.completions.create(model=model_name, messages=ASK, tools=[WEATHER], tool_choice="required",
                                    max_tokens=6, temperature=0)
    assert r.choices[0].finish_reason == "length" and not r.choices[0].message.content


@pytest.mark.parametrize("max_tokens", [10, 40])
def test_after_a_tool_result_with_tools_still_offered_the_answer_is_never_empty(oai, model_name, max_tokens):
    r = oai.chat.completions.create(model=model_name, messages=AFTER_THE_CALL, tools=[WEATHER], tool_choice="auto",
                                    max_tokens=max_tokens, temperature=0)
    message = r.choices[0].message
    assert r.usage.completion_tokens > 0
    if not message.tool_calls:  # a text answer, or a call cut short: either way, what was generated
        check_text_not_markup(message.content)


def test_a_final_assistant_message_is_continued(api, model_name):
    counting = [{"role": "user", "content": "Count from 1 to 10, separated by commas."},
                {"role": "assistant", "content": "1, 2, 3, 4, 5, 6,"}]
    r = httpx.post(f"{api}/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=60,
                   json={"model": model_name, "messages": counting, "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"].lstrip().startswith("7"), r.json()


def test_health_without_the_key_says_only_whether_the_server_is_up(api, model_name):
    root = api.removesuffix("/v1")
    # A health check (a load balancer, a container's) needs no key, and learns no more than that.
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": "wrong"}):
        r = httpx.get(f"{root}/health", headers=headers, timeout=10)
        assert r.status_code == 200 and r.json() == {"status": "ok"}, (headers, r.text)
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}):
        health = httpx.get(f"{root}/health", headers=headers, timeout=10).json()
        assert health["model"] == model_name and health["busy"] in (True, False)
