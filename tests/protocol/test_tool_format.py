"""Tools in the prompt: a template that knows tools gets them (and earlier calls' arguments as objects);
one that does not gets them as text in the system message, earlier calls and results as plain turns."""

from __future__ import annotations

import json

from app.engine.prompt.template import ChatTemplate
from tests.helpers.templates import CHATML
from app.protocol.tool_format import CALL_CLOSE, CALL_OPEN, RESPONSE_OPEN

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
ROUND_TRIP = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"sky": "snow"}'},
    {"role": "tool", "tool_call_id": "call_2", "content": '{"wind": 3}'},
]
# A template in the style of Hugging Face's tool-aware ones: tools as JSON, arguments written with tojson.
KNOWS_TOOLS = (
    "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}"
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
    "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }} {{ c.function.arguments | tojson }}{% endfor %}\n"
    "{% endfor %}"
)


def test_a_template_without_tools_gets_them_as_text():
    prompt = ChatTemplate(CHATML).render(ROUND_TRIP, tools=[WEATHER])
    system = prompt.split("<|im_end|>")[0]
    # Described as a compact signature (#54.5: the whole JSON Schema tripled a coding agent's prompt).
    assert system.startswith("<|im_start|>system\nBe brief.\n\n") and "get_weather(city?: string) - Weather in a city" in system
    assert f'{CALL_OPEN}\n{{"name": "get_weather", "arguments": {{"city": "Oslo"}}}}\n{CALL_CLOSE}' in prompt
    # Both results of the turn come back in one user turn, in order.
    user_turns = [t for t in prompt.split("<|im_start|>") if t.startswith("user\n")]
    assert len(user_turns) == 2 and user_turns[1].count(RESPONSE_OPEN) == 2
    assert user_turns[1].index('"snow"') < user_turns[1].index('"wind"')
    assert prompt.endswith("<|im_start|>assistant\n")


def test_a_template_without_tools_and_no_system_message_gets_one():
    prompt = ChatTemplate(CHATML).render([{"role": "user", "content": "hi"}], tools=[WEATHER])
    assert prompt.startswith("<|im_start|>system\nYou may call one or more functions")


def test_a_template_that_knows_tools_renders_them_itself():
    prompt = ChatTemplate(KNOWS_TOOLS).render(ROUND_TRIP, tools=[WEATHER])
    assert prompt.startswith("TOOLS:get_weather;")
    # The client's JSON text arguments reach the template as an object, as templates expect.
    assert 'CALL get_weather {"city": "Oslo"}' in prompt
    assert "[tool]" in prompt and CALL_OPEN not in prompt


def test_plain_conversations_render_as_before():
    messages = [{"role": "user", "content": "hi"}]
    assert ChatTemplate(CHATML).render(messages) == ChatTemplate(CHATML).render(messages, tools=None)
    assert json.loads(json.dumps(ROUND_TRIP)) == ROUND_TRIP  # rendering changed nothing the caller holds


def test_a_conversation_the_template_refuses_is_the_requests_fault():
    from app.protocol.messages import ErrorKind

    strict = ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations start with a user.') }}"
              "{% endif %}")
    for template in (strict, "{{ messages[0]['content'] + 1 }}"):
        try:
            ChatTemplate(template).render([{"role": "system", "content": "x"}])
        except Exception as exc:
            assert ErrorKind.of(exc) is ErrorKind.INVALID_REQUEST and "chat template" in str(exc)
        else:
            raise AssertionError("the template rendered")
