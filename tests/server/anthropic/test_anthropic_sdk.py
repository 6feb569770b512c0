"""`hearth serve` through Anthropic's official Python SDK, as Claude clients use it: messages, streaming,
tools and their results, count_tokens, structured output (output_config, messages.parse), assistant prefill,
and the SDK's typed errors. Beside tests/server/anthropic/test_anthropic_api.py, which speaks raw HTTP."""

from __future__ import annotations

import json

import jsonschema
import pytest

anthropic = pytest.importorskip("anthropic")
from pydantic import BaseModel  # noqa: E402 (after the skip)

from tests.server.conftest import KEY  # noqa: E402

pytestmark = pytest.mark.slow

HELLO = [{"role": "user", "content": "Name three colors."}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# This SDK (2.x) has no temperature argument any more (Anthropic's newest models take none); Hearth still reads it.
GREEDY = {"temperature": 0}
WEATHER = {"name": "get_weather", "description": "The weather in a city now",
           "input_schema": {"type": "object", "additionalProperties": False, "required": ["city"],
                            "properties": {"city": {"type": "string", "maxLength": 30}}}}


@pytest.fixture
def claude(api):
    # The SDK adds /v1/messages to the server's root.
    return anthropic.Anthropic(base_url=api.removesuffix("/v1"), api_key=KEY, max_retries=0, timeout=120)


def test_a_message(claude, model_name):
    m = claude.messages.create(model=model_name, max_tokens=12, extra_body=GREEDY, system="You are brief.", messages=HELLO)
    assert m.type == "message" and m.role == "assistant" and m.model == model_name
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens") and m.usage.output_tokens <= 12


def test_a_streamed_message_adds_up(claude, model_name):
    with claude.messages.stream(model=model_name, max_tokens=12, extra_body=GREEDY, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens") and 0 < final.usage.output_tokens <= 12


def test_tools_and_their_results(claude, model_name):
    m = claude.messages.create(model=model_name, max_tokens=60, extra_body=GREEDY, messages=ASK, tools=[WEATHER],
                               tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert m.stop_reason == "tool_use" and [block.type for block in m.content] == ["tool_use"]
    call = next(block for block in m.content if block.type == "tool_use")
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    jsonschema.validate(call.input, WEATHER["input_schema"])
    answer = claude.messages.create(model=model_name, max_tokens=20, extra_body=GREEDY, tools=[WEATHER], messages=ASK + [
        {"role": "assistant", "content": [block.model_dump() for block in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 24 C"}]}])
    assert answer.content and answer.usage.output_tokens > 0
    with claude.messages.stream(model=model_name, max_tokens=60, extra_body=GREEDY, messages=ASK, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather",
                                             "disable_parallel_tool_use": True}) as stream:
        final = stream.get_final_message()
    streamed = next(block for block in final.content if block.type == "tool_use")
    jsonschema.validate(streamed.input, WEATHER["input_schema"])


@pytest.mark.parametrize("extra", [{}, {"system": "You are brief."}, {"tools": [WEATHER]}])
def test_count_tokens_is_what_the_message_then_takes(claude, model_name, extra):
    counted = claude.messages.count_tokens(model=model_name, messages=ASK, **extra)
    m = claude.messages.create(model=model_name, max_tokens=1, messages=ASK, **extra)
    assert counted.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 5


class City(BaseModel):
    city: str
    country: str


def test_structured_output_is_honoured(claude, model_name):
    schema = {"type": "object", "additionalProperties": False, "required": ["city"],
              "properties": {"city": {"type": "string", "maxLength": 20}}}
    m = claude.messages.create(model=model_name, max_tokens=40, extra_body=GREEDY,
                               messages=[{"role": "user", "content": "Name a big city."}],
                               output_config={"format": {"type": "json_schema", "schema": schema}})
    if m.stop_reason == "end_turn":
        jsonschema.validate(json.loads(m.content[0].text), schema)
    parsed = claude.messages.parse(model=model_name, max_tokens=60, extra_body=GREEDY, output_format=City,
                                   messages=[{"role": "user", "content": "Name a big city and its country."}])
    if parsed.stop_reason == "end_turn":
        assert isinstance(parsed.parsed_output, City)
    with pytest.raises(anthropic.BadRequestError) as err:  # one grammar at a time: said, not ignored
        claude.messages.create(model=model_name, max_tokens=5, messages=ASK, tools=[WEATHER],
                               output_config={"format": {"type": "json_schema", "schema": schema}})
    assert "output_config" in err.value.message


def test_an_assistant_prefill_is_continued(claude, model_name):
    m = claude.messages.create(model=model_name, max_tokens=4, extra_body=GREEDY, messages=[
        {"role": "user", "content": "Count from 1 to 10, separated by commas."},
        {"role": "assistant", "content": "1, 2, 3, 4, 5, 6,"}])
    assert m.content[0].text.lstrip().startswith("7"), m.content


def test_a_tool_call_cut_off_by_max_tokens_comes_back_as_text(claude, model_name):
    # 16 tokens: enough to write the call's name, too few to end it (12 reached '{ "name": "g' once the tools were
    # described as signatures, #54.5: the grammar lets the model space its JSON as it likes).
    m = claude.messages.create(model=model_name, max_tokens=16, extra_body=GREEDY, messages=ASK, tools=[WEATHER],
                               tool_choice={"type": "any"})
    assert m.stop_reason == "max_tokens" and [block.type for block in m.content] == ["text"]
    assert m.content[0].text and "<tool_call>" not in m.content[0].text and '"get_' in m.content[0].text
    with claude.messages.stream(model=model_name, max_tokens=16, extra_body=GREEDY, messages=ASK, tools=[WEATHER],
                                tool_choice={"type": "any"}) as stream:
        assert "".join(stream.text_stream) == m.content[0].text


def test_errors_are_the_sdks_types(api, claude, model_name):
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="no-such-model", max_tokens=5, messages=HELLO)
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=api.removesuffix("/v1"), api_key="wrong", max_retries=0).messages.create(
            model=model_name, max_tokens=5, messages=HELLO)
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=model_name, max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
