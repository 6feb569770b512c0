"""The Responses API (`/v1/responses`) through the official OpenAI client against a real `hearth serve`:
create, stream and parse, function tools with their outputs going back, stored responses continued with
previous_response_id (reusing the slot's prompt), read back, listed and deleted, and every field that would
change the answer refused with a 400 that names it."""

from __future__ import annotations

import json
import threading
import time

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from tests.server.conftest import KEY, start_server, stop_server

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city now",
           "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                          "properties": {"city": {"type": "string", "maxLength": 30}}}}


def test_a_text_input_is_answered_as_chat_completions_answers_it(oai, model_name):
    """The same engine path: at temperature 0 the same question gets the same words either way."""
    r = oai.responses.create(model=model_name, input="Name a colour.", instructions="Answer in one word.",
                             max_output_tokens=12, temperature=0)
    chat = oai.chat.completions.create(model=model_name, max_tokens=12, temperature=0, messages=[
        {"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Name a colour."}])
    assert r.id.startswith("resp_") and r.object == "response" and r.model == model_name
    assert r.output_text == chat.choices[0].message.content and r.output_text
    assert [item.type for item in r.output] == ["message"] and r.output[0].role == "assistant"
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.instructions == "Answer in one word." and r.status in ("completed", "incomplete")


def test_max_output_tokens_ends_an_answer_as_incomplete(oai, model_name):
    r = oai.responses.create(model=model_name, input="Tell me a long story about a dragon.", max_output_tokens=5,
                             temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5


def test_a_stream_is_the_official_event_sequence(oai, model_name):
    with oai.responses.stream(model=model_name, input="Say hi.", max_output_tokens=200, temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == events[-4].text and final.status == "completed"
    assert oai.responses.retrieve(final.id).output_text == final.output_text  # stored as it was streamed


def test_function_calls_and_their_outputs_going_back(oai, model_name):
    r = oai.responses.create(model=model_name, input="What is the weather in Paris?", tools=[WEATHER],
                             tool_choice="required", parallel_tool_calls=False, temperature=0, max_output_tokens=200)
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
    assert r.output_text == ""
    answer = oai.responses.create(model=model_name, previous_response_id=r.id, tools=[WEATHER], tool_choice="none",
                                  input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                          "output": "Sunny, 21 C."}], temperature=0, max_output_tokens=40)
    assert answer.output_text and [item.type for item in answer.output] == ["message"]
    assert answer.usage.input_tokens_details.cached_tokens > 0  # the call's turn was still in the slot


def test_functions_in_a_namespace_are_offered_and_their_calls_say_it(oai, model_name):
    """The Codex CLI (0.171.0, its default config) groups its sub-agent tools in a namespace tool; Hearth refused
    the type, so Codex needed `[agents] enabled = false`. A namespaced function is offered by its name, and its
    call says its namespace, going out and coming back."""
    agents = {"type": "namespace", "name": "multi_agent_v1", "description": "Tools for sub-agents.",
              "tools": [{**WEATHER, "strict": False}]}
    r = oai.responses.create(model=model_name, input="What is the weather in Paris?", tools=[agents],
                             tool_choice="required", parallel_tool_calls=False, temperature=0, max_output_tokens=200)
    calls = [item.to_dict() for item in r.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0]["name"] == "get_weather" and calls[0]["namespace"] == "multi_agent_v1"
    assert r.to_dict()["tools"][0]["type"] == "namespace"
    answer = oai.responses.create(model=model_name, tools=[agents], tool_choice="none", temperature=0,
                                  max_output_tokens=40, input=[
                                      {"role": "user", "content": "What is the weather in Paris?"}, calls[0],
                                      {"type": "function_call_output", "call_id": calls[0]["call_id"],
                                       "output": "Sunny, 21 C."}])
    assert answer.output_text
    listed = [i.to_dict(warnings=False) for i in oai.responses.input_items.list(answer.id, order="asc").data]
    assert listed[1]["type"] == "function_call" and listed[1]["namespace"] == "multi_agent_v1"
    for tools, param in (([{**agents, "tools": [{"type": "web_search"}]}], "tools[0].tools[0].type"),
                         ([{**agents, "tools": "get_weather"}], "tools[0]"),
                         ([agents, {**agents, "name": "other"}], "tools[1].tools[0].name")):
        with pytest.raises(openai.BadRequestError) as err:
            oai.responses.create(model=model_name, input="Hi", tools=tools)
        assert err.value.body["param"] == param, err.value.body


def test_a_named_function_streams_its_arguments(oai, model_name):
    with oai.responses.stream(model=model_name, input="Weather in Oslo?", tools=[WEATHER], temperature=0,
                              tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=200,
                              parallel_tool_calls=False) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds and "response.output_text.delta" not in kinds
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    call = [item for item in final.output if item.type == "function_call"]
    assert len(done) == len(call) == 1 and done[0].arguments == call[0].arguments
    jsonschema.validate(json.loads(call[0].arguments), WEATHER["parameters"])


class City(BaseModel):
    name: str
    country: str


def test_parse_gives_the_pydantic_model(oai, model_name):
    r = oai.responses.parse(model=model_name, input="Name a city and its country.", text_format=City, temperature=0,
                            max_output_tokens=100)
    assert isinstance(r.output_parsed, City) and r.output_parsed.name


def test_two_turns_through_previous_response_id_reuse_the_prompt(oai, model_name):
    first = oai.responses.create(model=model_name, input="My name is Ada. Say hello.", temperature=0,
                                 max_output_tokens=30)
    second = oai.responses.create(model=model_name, input="What is my name?", previous_response_id=first.id,
                                  temperature=0, max_output_tokens=30)
    assert second.previous_response_id == first.id
    # The whole first turn, question and answer, was sent again, and the slot still held it.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    items = oai.responses.input_items.list(second.id, order="asc")
    assert [(i.type, i.role) for i in items.data] == [("message", "user")]
    assert items.data[0].content[0].text == "What is my name?" and items.data[0].id.startswith("msg_")


def test_a_stored_response_is_read_back_and_deleted(oai, model_name):
    r = oai.responses.create(model=model_name, input="Say yes.", temperature=0, max_output_tokens=8)
    again = oai.responses.retrieve(r.id)
    assert again.output_text == r.output_text and again.usage.output_tokens == r.usage.output_tokens
    oai.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as err:
        oai.responses.retrieve(r.id)
    assert err.value.body["code"] == "not_found" and r.id in err.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model=model_name, input="And?", previous_response_id=r.id, max_output_tokens=8)


def test_store_false_keeps_nothing(oai, model_name):
    r = oai.responses.create(model=model_name, input="Say no.", store=False, max_output_tokens=8)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)


def test_an_unknown_previous_response_is_a_404_in_openais_shape(oai, model_name):
    with pytest.raises(openai.NotFoundError) as err:
        oai.responses.create(model=model_name, input="Hi", previous_response_id="resp_nothing")
    assert err.value.body == {"message": "Previous response with id 'resp_nothing' not found.",
                              "type": "invalid_request_error", "param": "previous_response_id",
                              "code": "previous_response_not_found"}


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].type"),
    ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools[0].type"),
    ({"tools": [{"type": "mcp", "server_label": "x", "server_url": "https://example.com/mcp"}]}, "tools[0].server_url"),
    # An image is read now (#53.5), as a data URL: anything else in image_url is refused naming it; a file is not.
    ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].image_url"),
    ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"type": "computer_call_output", "call_id": "c", "output": {}}]}, "input[0].type"),
    ({"input": [{"type": "message", "role": "robot", "content": "hi"}]}, "input[0].role"),
    ({"background": True}, "background"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"include": ["message.output_text.logprobs"]}, "include"),  # (encrypted reasoning is taken: nothing is hidden)
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nope"}}}}, "text.format.schema"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": 9}, "temperature"),
    ({"tool_choice": "required"}, "tool_choice"),
])
def test_what_would_change_the_answer_is_refused_naming_the_field(oai, model_name, extra, param):
    body = {"model": model_name, "input": "Hi", **extra}
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as err:
        oai.responses.create(**body)
    assert err.value.body["param"] == param, err.value.body
    assert time.monotonic() - started < 10


def test_a_reasoning_effort_a_plain_model_cannot_follow_says_so(oai, model_name):
    with pytest.raises(openai.BadRequestError) as err:
        oai.responses.create(model=model_name, input="Hi", reasoning={"effort": "low"})
    assert "does not reason" in err.value.body["message"] and err.value.body["code"] == "unsupported_effort"


def test_two_clients_continuing_one_response_at_once_each_get_their_own(oai, model_name):
    first = oai.responses.create(model=model_name, input="Pick a number.", temperature=0, max_output_tokens=10)
    answers, errors = [], []

    def go(question: str) -> None:
        try:
            answers.append(oai.responses.create(model=model_name, input=question, previous_response_id=first.id,
                                                temperature=0, max_output_tokens=10))
        except Exception as exc:  # noqa: BLE001 - the test reports what went wrong
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(q,)) for q in ("Double it.", "Halve it.")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(answers) == 2 and answers[0].id != answers[1].id
    for r in answers:
        assert r.previous_response_id == first.id and oai.responses.retrieve(r.id).id == r.id


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
def test_a_thousand_linked_responses_and_a_store_at_its_bound(tmp_path, model_name):
    """A chain of 1,000 stored responses is read back in one query and answered (its start cut to fit the context
    with truncation auto, refused with the context's 400 without); a store kept to 3 responses lets the oldest go,
    and a chain that reaches a response let go says which one is missing."""
    from app.server.responses.store import ResponseStore

    home = tmp_path / "home"
    proc, base = start_server("--api-key", KEY, "--keep-responses", "1100", env={"HEARTH_HOME": str(home)})
    try:
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
        seed = client.responses.create(model=model_name, input="Start.", max_output_tokens=4)
        store = ResponseStore(home / "data" / "responses.sqlite3", max_responses=1100)
        previous = seed.id
        for i in range(1000):
            rid = f"resp_chain{i:04d}"
            store.put({"id": rid, "previous_response_id": previous, "created_at": time.time()},
                      [{"type": "message", "id": f"msg_q{i}", "role": "user", "content": f"Question {i}?"}],
                      [{"type": "message", "id": f"msg_a{i}", "role": "assistant",
                        "content": [{"type": "output_text", "text": f"Answer {i}."}]}])
            previous = rid
        store.close()
        started = time.monotonic()
        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(model=model_name, input="And now?", previous_response_id=previous,
                                    max_output_tokens=4)
        assert err.value.body["code"] == "context_length_exceeded"
        r = client.responses.create(model=model_name, input="And now?", previous_response_id=previous,
                                    truncation="auto", max_output_tokens=4)
        assert r.status in ("completed", "incomplete") and r.previous_response_id == previous
        assert time.monotonic() - started < 60
    finally:
        stop_server(proc)

    proc, base = start_server("--api-key", KEY, "--keep-responses", "3", env={"HEARTH_HOME": str(tmp_path / "h3")})
    try:
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
        first = client.responses.create(model=model_name, input="One.", max_output_tokens=2)
        second = client.responses.create(model=model_name, input="Two.", previous_response_id=first.id,
                                         max_output_tokens=2)
        others = [client.responses.create(model=model_name, input="More.", max_output_tokens=2) for _ in range(3)]
        for r in (first, second):
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve(r.id)
        assert [client.responses.retrieve(r.id).id for r in others] == [r.id for r in others]
        third = client.responses.create(model=model_name, input="Three.", previous_response_id=others[0].id,
                                        max_output_tokens=2)  # others[0] is stored: it continues
        assert third.previous_response_id == others[0].id
        # others[0] is let go now; a response that continues it still stands, but its chain is broken
        with pytest.raises(openai.NotFoundError) as err:
            client.responses.create(model=model_name, input="Go on.", previous_response_id=third.id,
                                    max_output_tokens=2)
        assert others[0].id in err.value.body["message"] and "no longer stored" in err.value.body["message"]
    finally:
        stop_server(proc)


THINKS = 'root ::= "<think>" [a-z] [a-z ]{2,20} "</think>" [a-z] [a-z ]{2,20}'  # as test_reasoning_api's


def test_a_models_thinking_is_a_reasoning_item_apart_from_the_answer(oai, model_name):
    """A grammar makes the bundled model write <think>…</think> first, as a reasoning model does."""
    r = oai.responses.create(model=model_name, input="What colour is the sky?", temperature=0,
                             max_output_tokens=60, extra_body={"grammar": THINKS})
    assert [item.type for item in r.output] == ["reasoning", "message"]
    thought = r.output[0].content[0].text
    assert thought and "<" not in thought + r.output_text and r.output_text
    with oai.responses.stream(model=model_name, input="What colour is the sky?", temperature=0,
                              max_output_tokens=60, extra_body={"grammar": THINKS}) as stream:
        events = list(stream)
    streamed = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert streamed.strip() == thought
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    kinds = [e.type for e in events]
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
def test_hearths_own_mcp_tools_run_for_api_clients_only_where_the_user_allowed_them(tmp_path, model_name):
    """`hearth serve --tools time` offers the user's MCP server (mcp-server-time, a real one from PyPI): a request
    names it as an mcp tool, the server lists its tools, runs the calls the user allowed for good and gives the
    model their output; a tool not allowed does not run and the model is told why. Not offered: a 400."""
    from app.tools.servers import allow_always
    from tests.server.conftest import KEY

    home = tmp_path / "home"
    env = {"HEARTH_HOME": str(home)}
    import os
    import subprocess
    import sys
    subprocess.run([sys.executable, "-m", "app", "tools", "add", "time", "--", "mcp-server-time",
                    "--local-timezone", "UTC"], check=True, env={**os.environ, **env}, capture_output=True)
    proc, base = start_server("--api-key", KEY, "--tools", "time", env=env)
    try:
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
        time_tool = {"type": "mcp", "server_label": "time", "require_approval": "never"}
        ask = dict(model=model_name, input="What time is it in Tokyo?", tools=[time_tool], temperature=0,
                   max_output_tokens=120, tool_choice="required", parallel_tool_calls=False, max_tool_calls=1)
        refused = client.responses.create(**ask)
        kinds = [item.type for item in refused.output]
        assert kinds[0] == "mcp_list_tools" and kinds[1] == "mcp_call" and kinds[-1] == "message"
        listed = {t.name for t in refused.output[0].tools}
        assert {"get_current_time", "convert_time"} <= listed
        call = refused.output[1]
        assert call.server_label == "time" and call.status == "failed" and call.output is None
        assert "has not allowed" in json.dumps(call.error.model_dump())

        old = os.environ.get("HEARTH_HOME")
        os.environ["HEARTH_HOME"] = str(home)
        try:
            for tool in listed:
                allow_always("time", tool)  # as "Always" in the window does, while the server runs
        finally:
            os.environ.pop("HEARTH_HOME") if old is None else os.environ.__setitem__("HEARTH_HOME", old)
        with client.responses.stream(**ask) as stream:
            events = list(stream)
            ran = stream.get_final_response()
        call = next(item for item in ran.output if item.type == "mcp_call")
        assert call.status == "completed" and call.error is None
        assert json.loads(call.output)  # what mcp-server-time answered (a JSON object with the time)
        kinds = [e.type for e in events]
        assert kinds.index("response.mcp_list_tools.completed") < kinds.index("response.mcp_call.in_progress") \
            < kinds.index("response.mcp_call.completed") < kinds.index("response.completed")
        assert ran.output[-1].type == "message"  # the model answered again after the call
        # the stored response continues, its MCP call part of the conversation read back
        again = client.responses.create(model=model_name, input="Thanks.", previous_response_id=ran.id,
                                        max_output_tokens=8)
        alone = client.responses.create(model=model_name, input="Thanks.", max_output_tokens=8, store=False)
        # the question, the call, its output and the answer went in before "Thanks."
        assert again.usage.input_tokens > alone.usage.input_tokens + 40

        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(model=model_name, input="Hi", tools=[{"type": "mcp", "server_label": "other"}])
        assert err.value.body["code"] == "unknown_mcp_server" and "time" in err.value.body["message"]
    finally:
        stop_server(proc)


def test_a_thinking_the_token_limit_cut_with_tools_offered_is_incomplete():
    """A reasoning model offered tools spent max_output_tokens thinking, so its answer has no words and no call: the
    limit cut it, and chat completions said "length", Anthropic "max_tokens", but the Responses API said
    "completed" (an empty answer an agent takes as final) and Ollama "stop": the shared rule read "nothing after the
    last complete call" as "nothing cut" where there was no call at all. The answer's pieces are fed to the
    dialect's output items as the engine sends them."""
    from app.protocol import messages as P
    from app.server.ollama.endpoints import _Shape as OllamaShape
    from app.server.openai.chat_request import chat_request
    from app.server.openai.endpoints import _Shape as ChatShape
    from app.server.options import request_defaults
    from app.server.responses.endpoints import OutputItems, ResponsesApi
    from app.server.tools import CallReader

    pieces = ["<think>", "The user wants", " the weather in"]
    for finish, status in (("length", "incomplete"), ("context_full", "incomplete"), ("stop", "completed")):
        output = OutputItems(False, CallReader(["get_weather"]))
        for piece in [*pieces, ""]:
            output.feed(piece)
        response = {}
        done = P.Done({"finish_reason": finish, "prompt_tokens": 9, "completion_tokens": 60})
        ResponsesApi._finish(response, output, done)
        assert response["status"] == status, finish
        assert [i["type"] for i in output.items] == ["reasoning", "message"]
        assert (response["incomplete_details"] or {}).get("reason") == (
            "max_output_tokens" if status == "incomplete" else None)
        # The other dialects, on the same answer: each says the limit cut it.
        gen = chat_request({"messages": [{"role": "user", "content": "Weather?"}], "tools": [
            {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}]}, request_defaults())
        chat = ChatShape("m", True, gen, thinking=False).whole("".join(pieces), done)
        ollama = OllamaShape("m", True, gen.tools, thinking=False).whole("".join(pieces), done)
        assert chat["choices"][0]["finish_reason"] == ("length" if status == "incomplete" else "stop"), finish
        assert ollama["done_reason"] == ("length" if status == "incomplete" else "stop"), finish
