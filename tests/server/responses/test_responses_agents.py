"""The OpenAI Agents SDK (openai-agents) running agents against a real `hearth serve` through the Responses API:
a function tool the agent calls and whose output it returns, and a conversation continued by
previous_response_id."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.slow

agents = pytest.importorskip("agents", reason="the test extra installs openai-agents")


def _model(api: str, name: str):
    from openai import AsyncOpenAI

    from tests.server.conftest import KEY

    return agents.OpenAIResponsesModel(model=name, openai_client=AsyncOpenAI(base_url=api, api_key=KEY,
                                                                             max_retries=0, timeout=120))


@pytest.fixture(autouse=True)
def _no_tracing():
    agents.set_tracing_disabled(True)  # its traces go to OpenAI's servers, which no test may reach


def test_an_agent_calls_its_function_tool(api, model_name):
    cities: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        cities.append(city)
        return f"Sunny and 21 C in {city}."

    # The bundled 135M model is no tool user: required makes it call, and the agent stops at the tool's answer
    # (the SDK's stop_on_first_tool) rather than asking the model to word it.
    agent = agents.Agent(name="weather", instructions="Use the weather tool.", tools=[get_weather],
                         model=_model(api, model_name), tool_use_behavior="stop_on_first_tool",
                         model_settings=agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=200,
                                                             parallel_tool_calls=False))
    result = asyncio.run(agents.Runner.run(agent, "What is the weather in Paris?", max_turns=3))
    assert len(cities) == 1 and cities[0]
    assert result.final_output == f"Sunny and 21 C in {cities[0]}."
    assert result.last_response_id.startswith("resp_")


def test_a_two_turn_conversation_through_previous_response_id(api, model_name):
    agent = agents.Agent(name="talk", instructions="Answer briefly.", model=_model(api, model_name),
                         model_settings=agents.ModelSettings(temperature=0, max_tokens=200,
                                                             extra_body={"stop": [".", "!", "?", "\n"]}))  # a sentence each

    async def talk():
        first = await agents.Runner.run(agent, "My name is Ada.")
        second = await agents.Runner.run(agent, "What is my name?", previous_response_id=first.last_response_id)
        return first, second

    first, second = asyncio.run(talk())
    assert first.final_output and second.final_output
    usage = second.raw_responses[-1].usage
    # The second turn was sent with the first one before it (from the server's store), and the slot still held it.
    assert usage.input_tokens > first.raw_responses[-1].usage.input_tokens
    assert usage.input_tokens_details.cached_tokens > 0
