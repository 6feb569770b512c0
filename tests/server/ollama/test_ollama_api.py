"""#54.3: Ollama's API from the same `hearth serve`, driven by the official `ollama` client (PyPI `ollama`), the
client Open WebUI's and many editors' Ollama connections are built like: every call it makes first (tags, version,
show, ps), then chat and generate streamed and whole, options, JSON format, tools, embeddings, a load and an
unload, an unknown model as Ollama's 404, and the same key and bounds as the other dialects."""

from __future__ import annotations

import json
from importlib.metadata import version

import httpx
import pytest

from tests.server.conftest import KEY, start_server, stop_server

ollama = pytest.importorskip("ollama")
CLIENT_VERSION = version("ollama")  # recorded: the client this was tested with
MODEL = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    home = tmp_path_factory.mktemp("ollama_home")
    proc, base = start_server("--api-key", KEY, env={"HEARTH_HOME": str(home)})
    root = base[:-len("/v1")]
    yield root
    assert stop_server(proc)


@pytest.fixture
def client(served):
    return ollama.Client(host=served, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


def test_the_first_calls_of_an_ollama_client_are_answered(client, served):
    print(f"ollama client {CLIENT_VERSION}")
    assert httpx.get(served + "/").status_code == 200 and httpx.head(served + "/").status_code == 200
    tags = client.list()
    names = [m.model for m in tags.models]
    assert f"{MODEL}:latest" in names
    listed = next(m for m in tags.models if m.model == f"{MODEL}:latest")
    assert listed.size > 0 and listed.details.format == "gguf" and listed.details.quantization_level == "Q4_1"
    assert httpx.get(served + "/api/version").json()["version"]
    shown = client.show(f"{MODEL}:latest")
    assert "completion" in shown.capabilities and shown.details.format == "gguf"
    running = client.ps()
    assert [m.model for m in running.models] == [f"{MODEL}:latest"]


def test_chat_whole_and_streamed_give_the_same_greedy_answer(client):
    ask = [{"role": "user", "content": "Name three colors."}]
    options = {"temperature": 0, "num_predict": 24, "seed": 1}
    whole = client.chat(model=MODEL, messages=ask, options=options, stream=False)
    assert whole.done and whole.message.role == "assistant" and whole.message.content
    assert whole.eval_count and whole.eval_count <= 24 and whole.prompt_eval_count > 0
    pieces = list(client.chat(model=f"{MODEL}:latest", messages=ask, options=options, stream=True))
    assert pieces[-1].done and not any(p.done for p in pieces[:-1])
    assert "".join(p.message.content for p in pieces) == whole.message.content


def test_generate_with_a_system_and_json_format(client):
    schema = {"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "green", "blue"]}},
              "required": ["color"]}
    made = client.generate(model=MODEL, prompt="Give a JSON object with a key 'color'.", system="Answer in JSON.",
                           format=schema, options={"temperature": 0, "num_predict": 60}, stream=False)
    assert made.done
    assert json.loads(made.response)["color"] in ("red", "green", "blue")  # the schema's grammar holds the answer
    streamed = "".join(p.response for p in client.generate(model=MODEL, prompt="Say hi.",
                                                           options={"num_predict": 8, "temperature": 0}, stream=True))
    assert streamed


def test_tools_come_back_as_ollama_tool_calls(client):
    weather = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                "parameters": {"type": "object", "properties": {
                                                    "city": {"type": "string", "enum": ["Oslo", "Paris"]}},
                                                    "required": ["city"]}}}
    # The bundled 135M model does not choose tools by itself; the grammar of a required call is the OpenAI
    # request's, which Ollama has no word for: a tool the model calls comes back as Ollama's tool_calls either way.
    answer = client.chat(model=MODEL, messages=[{"role": "user", "content": "Weather in Oslo? Use the tool."}],
                         tools=[weather], options={"temperature": 0, "num_predict": 60}, stream=False)
    assert answer.done and "<tool_call>" not in (answer.message.content or "")  # calls as calls, never as markup
    for call in answer.message.tool_calls or []:
        assert call.function.name == "get_weather" and call.function.arguments["city"] in ("Oslo", "Paris")


def test_embeddings_on_both_endpoints(client):
    both = client.embed(model=MODEL, input=["a cat", "a dog"])
    assert len(both.embeddings) == 2 and len(both.embeddings[0]) > 10
    one = client.embeddings(model=MODEL, prompt="a cat")
    assert len(one.embedding) == len(both.embeddings[0])


def test_an_unknown_model_is_ollamas_404_and_bad_requests_are_its_error_shape(client, served):
    with pytest.raises(ollama.ResponseError) as raised:
        client.chat(model="llama3.2:3b", messages=[{"role": "user", "content": "hi"}], stream=False)
    assert raised.value.status_code == 404 and "not found" in raised.value.error
    r = httpx.post(served + "/api/chat", headers={"Authorization": f"Bearer {KEY}"},
                   json={"model": MODEL, "messages": "hi"})
    assert r.status_code == 400 and isinstance(r.json()["error"], str) and "messages" in r.json()["error"]
    # The key holds here as on /v1: an Ollama client that sends none is refused.
    r = httpx.post(served + "/api/chat", json={"model": MODEL, "messages": []})
    assert r.status_code == 401 and isinstance(r.json()["error"], str)
    # A name from Ollama's registry cannot be pulled (a Hugging Face name can: test_ollama_library.py); copy is
    # refused: a library model has one name, its file's. One sentence each.
    r = httpx.post(served + "/api/pull", headers={"Authorization": f"Bearer {KEY}"}, json={"model": "x"})
    assert r.status_code == 400 and "hf.co/OWNER/REPO:QUANT" in r.json()["error"]
    r = httpx.post(served + "/api/copy", headers={"Authorization": f"Bearer {KEY}"},
                   json={"source": MODEL, "destination": "mine"})
    assert r.status_code == 400 and "one name" in r.json()["error"]


def test_keep_alive_zero_unloads_and_a_request_without_messages_loads(client, served):
    assert client.ps().models
    unloaded = client.generate(model=MODEL, prompt="", keep_alive=0)
    assert unloaded.done and unloaded.done_reason == "unload"
    assert not client.ps().models
    loaded = client.chat(model=MODEL, messages=[], stream=False)
    assert loaded.done and client.ps().models


def test_ollama_port_serves_where_ollama_apps_look(tmp_path):
    """hearth serve --ollama-port: a second port (Ollama's 11434 in use) with the same APIs."""
    from tests.server.conftest import free_port

    port = free_port()
    proc, base = start_server("--ollama-port", str(port), env={"HEARTH_HOME": str(tmp_path)})
    try:
        there = ollama.Client(host=f"http://127.0.0.1:{port}", timeout=60)
        assert f"{MODEL}:latest" in [m.model for m in there.list().models]
        assert there.chat(model=MODEL, messages=[{"role": "user", "content": "Hi"}], stream=False,
                          options={"num_predict": 4}).done
        assert httpx.get(base + "/models").status_code == 200  # the first port is as it was
    finally:
        assert stop_server(proc)


def test_a_call_written_after_a_thinking_model_thinks_streams_as_a_call():
    """A reasoning model thinks, then writes its call as JSON (Qwen3's habit): streamed on /api/chat, each piece of
    thinking brought no text, and the empty text ended the call reader, so the call after the thinking came out as
    content. The answer's events are fed to the dialect's stream as the engine sends them (a real thinking model
    cannot be had here; the bundled model never thinks)."""
    import asyncio

    from app.protocol import messages as P
    from app.protocol.tool_calls import ToolUse
    from app.server.ollama.endpoints import _Shape

    tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    pieces = ["<think>", "The user", " wants the time.", "</think>", '{"name": "get_time", ', '"arguments": {}}']

    async def lines(think: bool) -> list[dict]:
        async def events():
            for piece in pieces if think else pieces[4:]:
                yield P.Token({"ev": "token", "id": 1, "text": piece})
            yield P.Done({"ev": "done", "id": 1, "finish_reason": "stop", "completion_tokens": len(pieces)})

        shape = _Shape(MODEL, True, ToolUse([tool], names=["get_time"]), thinking=False, think=True)
        return [json.loads(line) async for line in shape.lines(events())]

    for think in (True, False):
        messages = [line["message"] for line in asyncio.run(lines(think))]
        assert [c["function"] for m in messages for c in m.get("tool_calls", [])] == [
            {"name": "get_time", "arguments": {}}], think
        assert "".join(m["content"] for m in messages) == ""  # the call is no text
        assert "".join(m.get("thinking", "") for m in messages) == ("The user wants the time." if think else "")


def _ollama_lines(shape, pieces: list[str], finish: str) -> list[dict]:
    """The NDJSON lines a dialect's stream makes of an answer's pieces and its end, as the engine sends them."""
    import asyncio

    from app.protocol import messages as P

    async def events():
        for piece in pieces:
            yield P.Token({"ev": "token", "id": 1, "text": piece})
        yield P.Done({"ev": "done", "id": 1, "finish_reason": finish, "completion_tokens": len(pieces)})

    async def lines():
        return [json.loads(line) async for line in shape.lines(events())]

    return asyncio.run(lines())


def test_an_answer_the_context_cut_says_length_as_on_every_endpoint():
    """An answer that filled the context ran out of room, as one cut by num_predict: chat completions say "length",
    Anthropic "max_tokens", the Responses API incomplete; Ollama's done_reason said "stop", streamed and whole."""
    from app.protocol import messages as P
    from app.server.ollama.endpoints import _Shape

    for finish, reason in (("context_full", "length"), ("length", "length"), ("stop", "stop")):
        streamed = _ollama_lines(_Shape(MODEL, True), ["Red, green", " and"], finish)
        assert streamed[-1]["done"] and streamed[-1]["done_reason"] == reason, finish
        whole = _Shape(MODEL, False).whole("Red, green and", P.Done({"finish_reason": finish}))
        assert whole["done_reason"] == reason, finish


def test_thinking_held_back_as_a_tags_start_streams_at_the_end():
    """A thinking cut off where it might have been closing ("... <") keeps its last characters streamed, as the whole
    answer and the other dialects keep them: the end brought only thinking, and no line carried it."""
    from app.protocol import messages as P
    from app.server.ollama.endpoints import _Shape

    pieces = ["<think>", "Is a", " <"]
    streamed = _ollama_lines(_Shape(MODEL, True, thinking=False, think=True), pieces, "length")
    whole = _Shape(MODEL, True, thinking=False, think=True).whole("".join(pieces), P.Done({"finish_reason": "length"}))
    assert "".join(line["message"].get("thinking", "") for line in streamed) == whole["message"]["thinking"] == "Is a <"


def test_think_as_a_level_asks_for_the_thinking_and_false_leaves_it_out():
    """Ollama 0.12 takes `think` as true or as a level ("low", "medium", "high"); a level was taken as not asked, and
    the thinking was dropped from the answer. `think: false` left a thinking model's <think>...</think> in the
    answer's text (as reasoning_format none), where the guide says it leaves it out, as Ollama does."""
    from app.protocol import messages as P
    from app.server.ollama.endpoints import _Shape
    from app.server.ollama.request import ChatBody, openai_chat
    from app.server.openai.chat_request import chat_request
    from app.server.options import request_defaults

    asked = ChatBody(model=MODEL, messages=[{"role": "user", "content": "Time?"}], think=False)
    assert chat_request(openai_chat(asked, asked.messages), request_defaults()).reasoning_format is None

    pieces = ["<think>", "Hm.", "</think>", "Noon."]
    for think, shown in ((True, "Hm."), ("high", "Hm."), ("low", "Hm."), (None, ""), (False, "")):
        lines = _ollama_lines(_Shape(MODEL, True, thinking=False, think=think), pieces, "stop")
        assert "".join(line["message"].get("thinking", "") for line in lines) == shown, think
        assert "".join(line["message"]["content"] for line in lines) == "Noon.", think
        whole = _Shape(MODEL, True, thinking=False, think=think).whole("".join(pieces), P.Done({"finish_reason": "stop"}))
        assert whole["message"].get("thinking", "") == shown, think


def test_ollamas_fields_are_taken_under_the_one_field_policy(served, tmp_path):
    """docs/api.md's field policy, on Ollama's endpoints as on the others: a field Hearth has never heard of is
    answered and named in Hearth-Ignored-Fields (it was dropped without a word), --strict-fields refuses it, and a
    field Ollama's API has that would change the answer and cannot be done here is a 400 naming it (generate's
    suffix, template and context were ignored, and the answer was another than asked)."""
    auth = {"Authorization": f"Bearer {KEY}"}
    ask = {"model": MODEL, "stream": False, "options": {"num_predict": 2}}
    chat = {**ask, "messages": [{"role": "user", "content": "hi"}]}
    for path, body in (("/api/chat", chat), ("/api/generate", {**ask, "prompt": "hi"}),
                       ("/api/embed", {"model": MODEL, "input": "hi"}),
                       ("/api/embeddings", {"model": MODEL, "prompt": "hi"}), ("/api/show", {"model": MODEL})):
        r = httpx.post(served + path, headers=auth, timeout=120, json={**body, "from_the_future": 1})
        assert r.status_code == 200, (path, r.text)
        assert r.headers["hearth-ignored-fields"] == "from_the_future", path
        known = httpx.post(served + path, headers=auth, timeout=120,
                           json={**body, **({"verbose": True} if path == "/api/show" else {"keep_alive": "5m"})})
        assert known.status_code == 200 and "hearth-ignored-fields" not in known.headers, path
    for field, value in (("suffix", "return x"), ("template", "{{ .Prompt }}"), ("context", [1, 2, 3])):
        r = httpx.post(served + "/api/generate", headers=auth, timeout=120, json={**ask, "prompt": "hi", field: value})
        assert r.status_code == 400 and f"'{field}' is not supported" in r.json()["error"], (field, r.text)
    r = httpx.post(served + "/api/embed", headers=auth, timeout=120, json={"model": MODEL, "input": "hi",
                                                                           "dimensions": 8})
    assert r.status_code == 400 and "'dimensions'" in r.json()["error"]
    proc, base = start_server("--strict-fields", env={"HEARTH_HOME": str(tmp_path)})
    try:
        r = httpx.post(base[:-len("/v1")] + "/api/chat", timeout=120, json={**chat, "from_the_future": 1})
        assert r.status_code == 400 and "from_the_future" in r.json()["error"]
    finally:
        stop_server(proc)


def test_a_tool_result_answers_the_call_of_its_tool():
    """Ollama's tool messages name their tool, not the call: each was given the tool's name as its call id, which no
    call had, so the template could not pair a result with its call and the result lost its tool's name."""
    from app.server.ollama.request import ChatBody, openai_chat
    from app.server.openai.chat_request import chat_request
    from app.server.options import request_defaults

    calls = [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
             {"function": {"name": "get_time", "arguments": {}}}]
    messages = [{"role": "user", "content": "Weather and time in Oslo?"},
                {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "tool", "tool_name": "get_time", "content": "12:00"},
                {"role": "tool", "tool_name": "get_weather", "content": "rain"},
                {"role": "tool", "content": "a result that names no tool"}]
    asked = ChatBody(model=MODEL, messages=messages)
    said = chat_request(openai_chat(asked, messages), request_defaults()).messages
    ids = {c["function"]["name"]: c["id"] for c in said[1]["tool_calls"]}
    assert [(m["tool_call_id"], m.get("name"), m["content"]) for m in said[2:4]] == [
        (ids["get_time"], "get_time", "12:00"), (ids["get_weather"], "get_weather", "rain")]
    assert said[4]["tool_call_id"] == "call" and "name" not in said[4]  # nothing left to answer: as before


def test_pairing_results_with_calls_is_bounded_for_a_hostile_conversation():
    """A result is paired with its call without searching the calls: 60,000 calls in one message and a result for
    each (a 10 MB body holds that many) paired in well under a second, where a search per result took minutes; a
    call named by no string is paired by its place, and the chat reader then refuses it in one sentence."""
    import time

    from app.server.edge.errors import ApiError
    from app.server.ollama.request import ChatBody, openai_chat
    from app.server.openai.chat_request import chat_request
    from app.server.options import request_defaults

    n = 60_000
    calls = [{"function": {"name": "a", "arguments": {}}} for _ in range(n)]
    # Results that name a tool no call has: each was looked for through every call before it took the first.
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": calls},
                *({"role": "tool", "tool_name": "b", "content": "r"} for _ in range(n))]
    started = time.perf_counter()
    chat = openai_chat(ChatBody(model=MODEL, messages=messages), messages)
    assert time.perf_counter() - started < 20
    ids = [m["tool_call_id"] for m in chat["messages"][2:]]
    assert len(set(ids)) == n  # each call answered once
    odd = [{"role": "user", "content": "go"},
           {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": {"x": 1}}}]},
           {"role": "tool", "tool_name": {"x": 1}, "content": "r"}]
    with pytest.raises(ApiError):
        chat_request(openai_chat(ChatBody(model=MODEL, messages=odd), odd), request_defaults())
