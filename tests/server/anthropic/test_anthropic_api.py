"""Anthropic's Messages API (POST /v1/messages) over raw HTTP, as Anthropic's SDKs and tools speak it:
the message shape, stop reasons, the streamed events in their order, the error envelope, x-api-key, and
a tool_use / tool_result round trip."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.server.conftest import KEY

pytestmark = pytest.mark.slow

HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
HELLO = [{"role": "user", "content": "Name three colors."}]
STORY = [{"role": "user", "content": "Write a long story about the sea."}]
# A 1x1 PNG, whole (#53.5 reads image blocks with a base64 source).
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC")}}
WEATHER = {"name": "get_weather", "description": "The weather in a city now",
           "input_schema": {"type": "object", "additionalProperties": False, "required": ["city"],
                            "properties": {"city": {"type": "string", "maxLength": 30}}}}


def post(api: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(api + "/messages", json=body, headers=HEADERS if headers is None else headers, timeout=120)


def warm(api: str, model_name: str, messages: list[dict]) -> None:
    """Leave the prompt in the KV cache, so the requests compared next evaluate the same batch sizes (as
    tests/server/openai/test_openai_api.py's warm explains: other batch sizes round differently on some CPUs)."""
    post(api, {"model": model_name, "max_tokens": 1, "temperature": 0, "messages": messages})


def events_of(api: str, body: dict) -> list[tuple[str, dict]]:
    with httpx.stream("POST", api + "/messages", json={**body, "stream": True}, headers=HEADERS, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = []
    for block in raw.strip().split("\n\n"):
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        events.append((name[7:], json.loads(data[6:])))
        assert events[-1][1]["type"] == events[-1][0]
    return events


def test_a_message_in_anthropics_shape(api, model_name):
    r = post(api, {"model": model_name, "max_tokens": 20, "temperature": 0,
                   "system": [{"type": "text", "text": "You are brief."}], "messages": HELLO})
    assert r.status_code == 200, r.text
    m = r.json()
    assert m["id"].startswith("msg_") and m["type"] == "message" and m["role"] == "assistant"
    assert m["model"] == model_name and m["content"][0]["type"] == "text" and m["content"][0]["text"]
    assert m["stop_reason"] in ("end_turn", "max_tokens") and m["stop_sequence"] is None
    assert m["usage"]["output_tokens"] <= 20 and m["usage"]["input_tokens"] + m["usage"]["cache_read_input_tokens"] > 5


def test_stop_sequences_and_max_tokens_are_the_stop_reason(api, model_name):
    warm(api, model_name, HELLO)
    whole = post(api, {"model": model_name, "max_tokens": 30, "temperature": 0, "messages": HELLO}).json()
    text = whole["content"][0]["text"]
    word = text.split()[len(text.split()) // 2]
    cut = post(api, {"model": model_name, "max_tokens": 30, "temperature": 0, "messages": HELLO,
                     "stop_sequences": ["@@", word]}).json()
    assert cut["stop_reason"] == "stop_sequence" and cut["stop_sequence"] == word
    assert cut["content"][0]["text"] == text[: text.index(word)]
    short = post(api, {"model": model_name, "max_tokens": 2, "messages": STORY}).json()
    assert short["stop_reason"] == "max_tokens" and short["usage"]["output_tokens"] == 2


def test_streamed_events_come_in_anthropics_order(api, model_name):
    warm(api, model_name, STORY)
    events = events_of(api, {"model": model_name, "max_tokens": 12, "temperature": 0, "messages": STORY})
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["stop_reason"] is None
    text = "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
    assert all(data["index"] == 0 for name, data in events if name.startswith("content_block"))
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "max_tokens" and delta["usage"]["output_tokens"] == 12
    whole = post(api, {"model": model_name, "max_tokens": 12, "temperature": 0, "messages": STORY}).json()
    assert text == whole["content"][0]["text"]
    # message_start already counts the prompt, as Anthropic's does: the same count the whole answer gives.
    prompt = start["usage"]["input_tokens"] + start["usage"]["cache_read_input_tokens"]
    assert prompt > 0 and prompt == whole["usage"]["input_tokens"] + whole["usage"]["cache_read_input_tokens"]


@pytest.mark.parametrize("body, status, kind", [
    ({"messages": HELLO}, 400, "invalid_request_error"),  # no max_tokens
    ({"max_tokens": 5, "messages": []}, 400, "invalid_request_error"),
    # System messages inside `messages` are system text (#54.2), but a conversation needs a user turn.
    ({"max_tokens": 5, "messages": [{"role": "system", "content": "hi"}]}, 400, "invalid_request_error"),
    # Anthropic's own tools run on its servers: a 400 naming the tool, not an answer without it.
    ({"max_tokens": 5, "messages": HELLO, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400,
     "invalid_request_error"),
    ({"max_tokens": 5, "messages": HELLO, "temperature": 1.5}, 400, "invalid_request_error"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, 400,
     "invalid_request_error"),
    # An image block is read now (#53.5): to this model, which has no projector, it is a 400 that says so.
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [IMAGE, {"type": "text", "text": "What is it?"}]}]},
     400, "invalid_request_error"),
    # A name nothing answers to (Anthropic's own names, as Claude Code sends them, are the loaded model's: #54.4).
    ({"max_tokens": 5, "messages": HELLO, "model": "no-such-model"}, 404, "not_found_error"),
])
def test_errors_use_anthropics_envelope(api, model_name, body, status, kind):
    r = post(api, {"model": model_name, **body})
    assert r.status_code == status
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == kind and r.json()["error"]["message"]


def test_an_image_is_read_and_a_model_without_a_projector_says_why(api, model_name):
    r = post(api, {"model": model_name, "max_tokens": 5,
                   "messages": [{"role": "user", "content": [IMAGE, {"type": "text", "text": "What is it?"}]}]})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith(f"{model_name} cannot see images: it has no projector")
    # A block that is no image is named, as before.
    r = post(api, {"model": model_name, "max_tokens": 5,
                   "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("'messages.0.content.0.source' must be")


def test_the_key_goes_in_x_api_key_or_as_a_bearer_token(api, model_name):
    body = {"model": model_name, "max_tokens": 1, "messages": HELLO}
    wrong = post(api, body, {"x-api-key": "nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
    assert post(api, body, {}).status_code == 401
    assert post(api, body, {"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_a_tool_use_round_trip(api, model_name):
    ask = [{"role": "user", "content": "What is the weather in Rome?"}]
    first = post(api, {"model": model_name, "max_tokens": 80, "temperature": 0, "messages": ask, "tools": [WEATHER],
                       "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}})
    m = first.json()
    assert m["stop_reason"] == "tool_use", m
    uses = [b for b in m["content"] if b["type"] == "tool_use"]
    assert len(uses) == 1 and uses[0]["name"] == "get_weather" and uses[0]["id"].startswith("toolu_")
    assert set(uses[0]["input"]) == {"city"} and isinstance(uses[0]["input"]["city"], str)
    history = ask + [{"role": "assistant", "content": m["content"]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"],
                                                   "content": "22 degrees and sunny"}]}]
    second = post(api, {"model": model_name, "max_tokens": 30, "temperature": 0, "messages": history,
                        "tools": [WEATHER], "tool_choice": {"type": "none"}}).json()
    assert second["stop_reason"] in ("end_turn", "max_tokens") and second["content"][0]["type"] == "text"


def test_a_streamed_tool_use_block(api, model_name):
    events = events_of(api, {"model": model_name, "max_tokens": 80, "temperature": 0, "tools": [WEATHER],
                             "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
                             "messages": [{"role": "user", "content": "Weather in Rome?"}]})
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert starts[0]["type"] == "tool_use" and starts[0]["name"] == "get_weather" and starts[0]["input"] == {}
    partial = "".join(data["delta"]["partial_json"] for name, data in events
                      if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta")
    assert set(json.loads(partial)) == {"city"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_a_call_written_after_a_thinking_models_thinking_is_a_tool_use():
    """A reasoning model thinks, then writes its call as JSON (Qwen3's and DeepSeek-R1's habit): on the Messages API
    the answer was read with its <think>…</think> in it, so the call opening after the thinking came out as text (the
    thinking's markup with it) and the stop reason said end_turn, where the other dialects split the thinking off
    first and deliver the call. Now the thinking is split off as theirs is: a thinking block where the request asks
    for thinking, left out where it does not, and the call a tool_use block, streamed and whole. The answer's events
    are fed to the dialect's stream as the engine sends them (the bundled model never thinks)."""
    import asyncio

    from app.protocol import messages as P
    from app.server.anthropic.messages import _Message, messages_request

    pieces = ["<think>", "The user", " wants the weather.", "</think>\n\n", '{"name": "get_weather", ',
              '"arguments": {"city": "Oslo"}}']
    done = P.Done({"ev": "done", "id": 1, "finish_reason": "stop", "prompt_tokens": 9, "completion_tokens": 6})

    def shape(thinking: dict | None) -> _Message:
        body = {"max_tokens": 2048, "messages": HELLO, "tools": [WEATHER],
                **({"thinking": thinking} if thinking else {})}
        return _Message("m", messages_request(body), thinking=False, shows_thinking=thinking is not None)

    async def streamed(message: _Message) -> list[dict]:
        async def events():
            for piece in pieces:
                yield P.Token({"ev": "token", "id": 1, "text": piece})
            yield done

        raw = b"".join([chunk async for chunk in message.sse(events())]).decode()
        return [json.loads(line[len("data: "):]) for line in raw.splitlines() if line.startswith("data: ")]

    for thinking in ({"type": "enabled", "budget_tokens": 1024}, None):
        whole = shape(thinking).whole("".join(pieces), done)
        events = asyncio.run(streamed(shape(thinking)))
        blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
        deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
        kinds = ["thinking", "tool_use"] if thinking else ["tool_use"]
        assert [b["type"] for b in whole["content"]] == [b["type"] for b in blocks] == kinds, thinking
        assert whole["stop_reason"] == events[-2]["delta"]["stop_reason"] == "tool_use"
        assert whole["content"][-1]["input"] == {"city": "Oslo"} and blocks[-1]["name"] == "get_weather"
        assert json.loads("".join(d["partial_json"] for d in deltas if d["type"] == "input_json_delta")) == \
            {"city": "Oslo"}
        thought = "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta")
        assert thought == (whole["content"][0]["thinking"] if thinking else "")
        assert thought == ("The user wants the weather." if thinking else "")
        assert not any(d["type"] == "text_delta" for d in deltas)
