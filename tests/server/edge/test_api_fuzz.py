"""The server never dies from a request: every field of every endpoint gets values of the wrong type, huge
numbers, deep nesting and junk; bodies that are not objects, not JSON or not UTF-8. Each answer is a 4xx in
the endpoint's own error envelope (or a normal answer, where the odd value happens to be valid), never a
500; and afterwards the server still answers a normal request."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.server.conftest import KEY

pytestmark = pytest.mark.slow

HEADERS = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}  # as every SDK sends
DEEP = json.loads("[" * 500 + "]" * 500)
WRONG_VALUES = ["wrong", "", 1.5, -1, 10**30, 1e308, True, [], {}, [None], {"a": {"b": [1, {}]}}, DEEP,
                "\x00\ud7ff\ue000😀"]
USER = [{"role": "user", "content": "hi"}]
# A valid body per endpoint, with max_tokens 1 so that a value that happens to be valid costs one token.
VALID = {
    "/chat/completions": {"messages": USER, "max_tokens": 1},
    "/completions": {"prompt": "hi", "max_tokens": 1},
    "/embeddings": {"input": "hi"},
    "/messages": {"messages": USER, "max_tokens": 1},
    "/messages/count_tokens": {"messages": USER},
}
FIELDS = {
    "/chat/completions": ["model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
                          "min_p", "n", "seed", "stop", "stream", "stream_options", "frequency_penalty",
                          "presence_penalty", "repeat_penalty", "logit_bias", "response_format", "grammar", "tools",
                          "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs"],
    "/completions": ["model", "prompt", "max_tokens", "temperature", "echo", "stop", "seed", "logit_bias",
                     "response_format", "grammar", "stream", "logprobs"],
    "/embeddings": ["model", "input", "encoding_format", "dimensions"],
    "/messages": ["model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k", "stop_sequences",
                  "stream", "tools", "tool_choice", "output_config"],
    "/messages/count_tokens": ["model", "messages", "system", "tools", "tool_choice", "output_config"],
}
# Values inside the structures: messages, content blocks, formats, tools.
NESTED = {
    "/chat/completions": [
        {"messages": [{"role": "user"}]}, {"messages": [{"content": "hi"}]},
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": 1, "function": {"name": "f"}}]}]},
        {"messages": [{"role": "assistant", "tool_calls": "f"}]},
        {"messages": [{"role": "tool", "tool_call_id": 7, "content": "x"}]},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": DEEP}}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string",
                                                                                         "maxLength": 10**6}}}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"properties": [1]}}}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": 5, "schema": {}}}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer",
                                                                                         "minimum": "x"}}}},
        {"grammar": "root ::= " + "(" * 5000 + '"a"' + ")" * 5000},
        {"grammar": "root ::= [\\"},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": 7}}}]},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": DEEP}}]},
        {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function"}},
        {"stream_options": {"include_usage": "yes"}, "stream": True},
        {"logit_bias": {"99999999": 5}},
    ],
    "/messages": [
        {"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
        {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": 5}]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]},
        {"system": [{"type": "image"}]},
        {"tools": [{"name": "f", "input_schema": {"type": "wizard"}}]},
        {"tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"}},
        {"tools": [5]},
        {"output_config": {"format": {"type": "json_schema"}}},
        {"output_config": {"format": {"type": "json_schema", "schema": {"type": "array", "minItems": 10**9}}}},
        {"output_config": {"format": {"type": "text"}}},
        {"output_config": {"format": {"type": "json_schema", "schema": {}}}, "tools": [{"name": "f"}]},
    ],
    "/messages/count_tokens": [
        {"messages": [{"role": "user", "content": [{"type": "image"}]}]},
        {"tools": [{"name": "f", "input_schema": DEEP}]},
        {"messages": USER * 5000},
    ],
    "/embeddings": [{"input": [[1, "a"]]}, {"input": [["a"]]}, {"input": [[]]}, {"input": [""] * 3000},
                    {"input": [[0] * 5000]}],
}
RAW_BODIES = [b"", b"{", b"null", b"[]", b'"text"', b"42", b"\xff\xfe\x00", b"{\"messages\": \"\xc3\x28\"}",
              b"[" * 100_000 + b"]" * 100_000, b"{" + b'"a":{' * 50_000 + b"}" * 50_001]


def cases():
    for path, fields in FIELDS.items():
        for name in fields:
            for value in WRONG_VALUES:
                yield path, {**VALID[path], name: value}
    for path, changes in NESTED.items():
        for change in changes:
            yield path, {**VALID[path], **change}


def check_answer(path: str, response: httpx.Response) -> str | None:
    """Why this answer breaks the rules, or None."""
    if response.status_code >= 500:
        return f"status {response.status_code}: {response.text[:200]}"
    if response.status_code == 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return f"status {response.status_code} without a JSON body: {response.text[:100]!r}"
    if path.startswith("/messages"):
        ok = body.get("type") == "error" and set(body.get("error", {})) == {"type", "message"}
    else:
        ok = set(body.get("error", {})) == {"message", "type", "param", "code"}
    if not ok or not 400 <= response.status_code < 500:
        return f"status {response.status_code}, envelope {body}"
    message = body["error"]["message"]
    if not isinstance(message, str) or "\n" in message or not message.strip():
        return f"message not one sentence: {message!r}"
    return None


def test_every_malformed_field_is_a_4xx_in_the_right_envelope(api, model_name):
    problems = []
    with httpx.Client(base_url=api, headers=HEADERS, timeout=60) as http:
        for path, body in cases():
            body = {"model": model_name, **body} if "model" not in body else body
            response = http.post(path, content=json.dumps(body, allow_nan=False))
            problem = check_answer(path, response)
            if problem:
                problems.append(f"{path} {json.dumps(body)[:160]}: {problem}")
        for path in VALID:
            for raw in RAW_BODIES:
                response = http.post(path, content=raw)
                problem = check_answer(path, response) or (None if response.status_code == 400 else "not a 400")
                if problem:
                    problems.append(f"{path} raw {raw[:30]!r}: {problem}")
        assert not problems, "\n".join(problems)
        # Still alive and answering.
        assert http.get(api.removesuffix("/v1") + "/health").status_code == 200
        r = http.post("/chat/completions", json={"model": model_name, "messages": USER, "max_tokens": 3})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 3


def test_non_finite_numbers_are_a_400(api, model_name):
    # Python's json module reads NaN and Infinity, which are not JSON; they must not reach the engine.
    with httpx.Client(base_url=api, headers=HEADERS, timeout=60) as http:
        for value in ("NaN", "Infinity", "-Infinity"):
            raw = ('{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
                   '"temperature": %s}' % (model_name, value)).encode()
            assert http.post("/chat/completions", content=raw).status_code == 400
            raw = raw.replace(b'"max_tokens": 1', b'"max_tokens": ' + value.encode())
            assert http.post("/messages", content=raw).status_code == 400
