"""Tool calling through the official OpenAI client: forced and named calls whose arguments always parse
and fit the tool's schema, streamed calls with their index, text when the model chooses to answer, and a
full round trip with the tool's result going back in."""

from __future__ import annotations

import json

import jsonschema
import pytest
from openai import BadRequestError

pytestmark = pytest.mark.slow

WEATHER_ARGS = {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                "properties": {"city": {"type": "string", "maxLength": 30},
                               "unit": {"enum": ["celsius", "fahrenheit"]}}}
ADD_ARGS = {"type": "object", "additionalProperties": False, "required": ["a", "b"],
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
                                           "parameters": WEATHER_ARGS}},
         {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": ADD_ARGS}}]
SCHEMAS = {"get_weather": WEATHER_ARGS, "add": ADD_ARGS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_calls(calls) -> None:
    assert calls, "no tool call"
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert len({call.id for call in calls}) == len(calls)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_calls_parse_and_fit_their_tool(oai, model_name, seed):
    r = oai.chat.completions.create(model=model_name, messages=ASK, tools=TOOLS, tool_choice="required",
                                    temperature=1.0, seed=seed, max_tokens=200)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    check_calls(choice.message.tool_calls)


def test_a_named_function_is_the_one_called_once_without_parallel_calls(oai, model_name):
    r = oai.chat.completions.create(model=model_name, messages=ASK, tools=TOOLS, temperature=0, max_tokens=100,
                                    tool_choice={"type": "function", "function": {"name": "add"}},
                                    parallel_tool_calls=False)
    calls = r.choices[0].message.tool_calls
    check_calls(calls)
    assert [c.function.name for c in calls] == ["add"]


def test_streamed_calls_arrive_as_tool_call_deltas_with_an_index(oai, model_name):
    chunks = list(oai.chat.completions.create(model=model_name, messages=ASK, tools=TOOLS, tool_choice="required",
                                              temperature=0, max_tokens=200, stream=True))
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert [d.index for d in deltas] == list(range(len(deltas))) and deltas
    check_calls(deltas)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert not any(c.choices[0].delta.content for c in chunks if c.choices)


def test_auto_lets_the_model_answer_in_text(oai, model_name):
    # The bundled model, asked something no tool is for, answers; a tool-less answer is plain text.
    r = oai.chat.completions.create(model=model_name, messages=[{"role": "user", "content": "Say hello."}],
                                    tools=TOOLS, tool_choice="auto", temperature=0, max_tokens=30)
    message = r.choices[0].message
    if message.tool_calls:  # the model may call; then the calls must be well-formed
        check_calls(message.tool_calls)
        assert r.choices[0].finish_reason == "tool_calls"
    else:
        assert message.content and not message.content.startswith("<")
        assert r.choices[0].finish_reason in ("stop", "length")


def test_a_round_trip_puts_the_result_in_the_prompt_and_the_model_answers(oai, model_name):
    first = oai.chat.completions.create(model=model_name, messages=ASK, tools=TOOLS, temperature=0,
                                        max_tokens=100, parallel_tool_calls=False,
                                        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = first.choices[0].message.tool_calls[0]
    result = json.dumps({"city": "Paris", "temperature": 18, "unit": "celsius", "sky": "sunny"})
    history = ASK + [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": result}]
    second = oai.chat.completions.create(model=model_name, messages=history, tools=TOOLS, tool_choice="none",
                                         temperature=0, max_tokens=40)
    answer = second.choices[0]
    assert answer.message.tool_calls is None and answer.message.content
    assert answer.finish_reason in ("stop", "length")
    # The call and its result are in the prompt: it is longer than the question alone by at least the result.
    alone = oai.chat.completions.create(model=model_name, messages=ASK, max_tokens=1).usage.prompt_tokens
    assert second.usage.prompt_tokens > alone + len(result) // 8


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "function", "function": {"name": "x y"}}]}, "tools[0].function.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "fly"}}}, "tool_choice"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": ASK + [{"role": "tool", "content": "18 degrees"}]}, "messages[1].tool_call_id"),
    ({"messages": ASK + [{"role": "assistant", "tool_calls": [{"function": {"name": 5}}]}]},
     "messages[1].tool_calls[0]"),
])
def test_wrong_tool_requests_are_a_400_naming_the_field(oai, model_name, extra, param):
    with pytest.raises(BadRequestError) as err:
        oai.chat.completions.create(**{"model": model_name, "messages": ASK, "max_tokens": 5, **extra})
    assert err.value.body["param"] == param
