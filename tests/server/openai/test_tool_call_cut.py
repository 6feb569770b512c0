"""One rule for a tool call cut by the token limit, on every endpoint (#54.6, in the API guide): the complete calls
that fit are delivered, and the reason says whether the limit cut anything. Before, with tool_choice required and
max_tokens 80, chat completions said "tool_calls" for the same answer that the Responses API called incomplete,
and the OpenAI Agents SDK failed on the latter. parallel_tool_calls false with tool_choice required gives exactly one
call, so an agent's turn ends at its call."""

from __future__ import annotations

import asyncio
import json

import httpx
import jsonschema
import pytest

from tests.server.conftest import KEY
from tests.server.openai.test_tool_calls import ASK, SCHEMAS, TOOLS

pytestmark = pytest.mark.slow

agents = pytest.importorskip("agents", reason="the test extra installs openai-agents")
FUNCTIONS = [{"type": "function", **t["function"]} for t in TOOLS]  # the Responses API's shape


def fits(name: str, arguments: str) -> bool:
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])
    return True


def test_a_call_cut_by_the_limit_is_said_alike_on_both_endpoints(api, oai, model_name):
    # Measured on the bundled model: one complete call in 40 tokens, then a second that 80 tokens cut.
    ask = dict(model=model_name, tools=TOOLS, tool_choice="required", temperature=0)
    chat = oai.chat.completions.create(messages=ASK, max_tokens=80, **ask)
    calls = chat.choices[0].message.tool_calls
    assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 80
    assert calls and all(fits(c.function.name, c.function.arguments) for c in calls)  # complete calls, delivered
    streamed = list(oai.chat.completions.create(messages=ASK, max_tokens=80, stream=True, **ask))
    assert [c.choices[0].finish_reason for c in streamed if c.choices and c.choices[0].finish_reason] == ["length"]

    response = oai.responses.create(model=model_name, input=ASK, tools=FUNCTIONS, tool_choice="required",
                                    temperature=0, max_output_tokens=80)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert [(o.name, o.arguments) for o in response.output if o.type == "function_call"] == \
        [(c.function.name, c.function.arguments) for c in calls]

    # Anthropic's endpoint follows the same rule: the complete tool_use blocks, and max_tokens.
    message = httpx.post(api + "/messages", headers={"x-api-key": KEY}, timeout=120, json={
        "model": model_name, "max_tokens": 80, "temperature": 0, "messages": ASK,
        "tools": [{"name": t["function"]["name"], "description": t["function"]["description"],
                   "input_schema": t["function"]["parameters"]} for t in TOOLS], "tool_choice": {"type": "any"}}).json()
    assert message["stop_reason"] == "max_tokens"
    assert [(b["name"], b["input"]) for b in message["content"] if b["type"] == "tool_use"] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in calls]


def test_one_call_without_parallel_calls_ends_the_answer_on_both_endpoints(oai, model_name):
    chat = oai.chat.completions.create(model=model_name, messages=ASK, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, temperature=0, max_tokens=80)
    [call] = chat.choices[0].message.tool_calls
    assert chat.choices[0].finish_reason == "tool_calls" and chat.usage.completion_tokens < 80
    assert fits(call.function.name, call.function.arguments)
    response = oai.responses.create(model=model_name, input=ASK, tools=FUNCTIONS, tool_choice="required",
                                    parallel_tool_calls=False, temperature=0, max_output_tokens=80)
    assert response.status == "completed" and response.incomplete_details is None
    [item] = [o for o in response.output if o.type == "function_call"]
    assert (item.name, item.arguments) == (call.function.name, call.function.arguments)


def test_the_agents_sdk_runs_its_tool_with_80_tokens(api, model_name):
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)  # its traces go to OpenAI's servers, which no test may reach
    cities: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        cities.append(city)
        return f"Sunny and 21 C in {city}."

    model = agents.OpenAIResponsesModel(model=model_name, openai_client=AsyncOpenAI(
        base_url=api, api_key=KEY, max_retries=0, timeout=120))
    agent = agents.Agent(name="weather", instructions="Use the weather tool.", tools=[get_weather], model=model,
                         tool_use_behavior="stop_on_first_tool",
                         model_settings=agents.ModelSettings(tool_choice="required", parallel_tool_calls=False,
                                                             temperature=0, max_tokens=80))
    result = asyncio.run(agents.Runner.run(agent, "What is the weather in Paris?", max_turns=2))
    assert len(cities) == 1 and result.final_output == f"Sunny and 21 C in {cities[0]}."
    assert result.raw_responses[-1].usage.output_tokens < 80
