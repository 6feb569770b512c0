"""Text at the edge (app/server/edge/request_body.py), against a real `hearth serve`: a lone surrogate ("\\ud800",
valid JSON but no text) in any text field of any endpoint is a 400 in the endpoint's own error shape, naming
the field, and leaves no crash log and no busy model behind. The official clients cannot send one (they
fail to encode it), but any client that writes JSON itself can: these bodies are sent as raw JSON text."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.server.conftest import start_server, stop_server

pytestmark = pytest.mark.slow

LONE = "\\ud800"  # as it travels in JSON: the escape, without its pair
USER = '{"role":"user","content":"Hi"}'
TOOL = ('{"type":"function","function":{"name":"%s","description":"%s","parameters":{"type":"object",'
        '"properties":{"%s":{"type":"string"}}}}}')
CASES = [  # (path, body, the field the error names)
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":"%s"}]}' % LONE, "messages[0].content"),
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":[{"type":"text","text":"a%sb"}]}]}' % LONE,
     "messages[0].content[0].text"),
    ("/v1/chat/completions", '{"messages":[{"role":"system","content":"%s"},%s]}' % (LONE, USER),
     "messages[0].content"),
    ("/v1/chat/completions", '{"messages":[%s],"stop":["x","%s"]}' % (USER, LONE), "stop[1]"),
    ("/v1/chat/completions", '{"messages":[%s],"tools":[%s]}' % (USER, TOOL % ("f", LONE, "a")),
     "tools[0].function.description"),
    ("/v1/chat/completions", '{"messages":[%s],"tools":[%s]}' % (USER, TOOL % ("f", "d", LONE)),
     "tools[0].function.parameters.properties.\\ud800"),
    ("/v1/chat/completions", '{"messages":[%s],"model":"%s"}' % (USER, LONE), "model"),
    ("/v1/completions", '{"prompt":"%s"}' % LONE, "prompt"),
    ("/v1/completions", '{"prompt":"Hi","stop":"%s"}' % LONE, "stop"),
    ("/v1/embeddings", '{"input":"%s"}' % LONE, "input"),
    ("/v1/embeddings", '{"input":["ok","%s"]}' % LONE, "input[1]"),
    ("/v1/messages", '{"max_tokens":3,"messages":[{"role":"user","content":"%s"}]}' % LONE, "messages[0].content"),
    ("/v1/messages", '{"max_tokens":3,"system":"%s","messages":[%s]}' % (LONE, USER), "system"),
    ("/v1/messages", '{"max_tokens":3,"system":[{"type":"text","text":"%s"}],"messages":[%s]}' % (LONE, USER),
     "system[0].text"),
    ("/v1/messages", '{"max_tokens":3,"stop_sequences":["%s"],"messages":[%s]}' % (LONE, USER),
     "stop_sequences[0]"),
    ("/v1/messages/count_tokens", '{"messages":[{"role":"user","content":"%s"}]}' % LONE, "messages[0].content"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("text_home")
    proc, base = start_server(env={"HEARTH_HOME": str(home)})
    yield base.removesuffix("/v1"), home
    assert stop_server(proc), "hearth serve did not stop on SIGTERM"


@pytest.mark.parametrize("path, body, field", CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_a_lone_surrogate_in_any_text_field_is_a_400_naming_it(server, path, body, field):
    base, _ = server
    started = time.monotonic()
    r = httpx.post(base + path, content=body.encode("ascii"), headers={"Content-Type": "application/json"},
                   timeout=30)
    assert time.monotonic() - started < 5
    assert r.status_code == 400, r.text
    if path.startswith("/v1/messages"):  # Anthropic's envelope
        error = r.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
        message = error["error"]["message"]
    else:
        error = r.json()["error"]
        assert error["code"] == "invalid_text" and error["param"] == field, error
        message = error["message"]
    assert f"'{field}'" in message and "surrogate" in message, message


def test_after_them_the_model_is_not_busy_and_no_crash_log_was_written(server):
    base, home = server
    for path, body, _ in CASES:
        httpx.post(base + path, content=body.encode("ascii"), headers={"Content-Type": "application/json"}, timeout=30)
    assert httpx.get(base + "/health", timeout=10).json()["busy"] is False
    assert not list((home / "logs").glob("crash-*.log"))
    plain = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                           "max_tokens": 3}, timeout=60)
    assert plain.status_code == 200, plain.text


def test_a_surrogate_pair_is_text_and_is_answered(server):
    base, _ = server
    body = '{"messages":[{"role":"user","content":"Say \\ud83d\\ude00"}],"max_tokens":3}'
    r = httpx.post(base + "/v1/chat/completions", content=body.encode("ascii"),
                   headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text
