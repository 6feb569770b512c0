"""`hearth serve` as other programs use it: the official OpenAI client and raw HTTP, on 127.0.0.1,
with the real bundled model in a real engine process behind a real uvicorn server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from openai import APIStatusError, AuthenticationError, BadRequestError, NotFoundError, OpenAI

from tests.server.conftest import CTX, KEY, free_port, start_server, stop_server

QUESTION = [{"role": "user", "content": "Name three colors."}]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # A server of this module's own: its first answer must come from a fresh engine, and it allows CORS.
    home = tmp_path_factory.mktemp("serve_home")
    proc, base = start_server("--api-key", KEY, "--cors", "http://editor.example",
                              env={"HEARTH_HOME": str(home)})
    yield base
    assert stop_server(proc), "hearth serve did not stop on SIGTERM"


@pytest.fixture
def client(server) -> OpenAI:
    return OpenAI(base_url=server, api_key=KEY, max_retries=0, timeout=120)


def model_of(client: OpenAI) -> str:
    return client.models.list().data[0].id


def warm(client: OpenAI, model: str, messages: list[dict]) -> None:
    """Leave these messages' prompt in the engine's KV cache, so the identical requests that follow all
    evaluate the same last prompt token alone: the same batch sizes, so the same logits on any CPU
    (llama.cpp rounds batches of other sizes differently; tests/engine/test_window.py measured it)."""
    client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=1)


def test_models_and_health(server, client):
    models = client.models.list().data
    assert [m.id for m in models] == ["SmolLM2-135M-Instruct.Q4_1"] and models[0].owned_by == "hearth"
    health = httpx.get(server.removesuffix("/v1") + "/health", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert health == {"status": "ok", "model": "SmolLM2-135M-Instruct.Q4_1", "busy": False}


def test_chat_answer_is_the_engines_answer(client, bundled_model):
    from app.backends.client import EngineClient
    from app.protocol.messages import Done, LoadOptions, SamplingOptions

    # The first answer of this server: its engine evaluates the whole prompt at once, as a fresh engine does.
    r = client.chat.completions.create(model=model_of(client), messages=QUESTION, temperature=0, max_tokens=30)
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content and choice.finish_reason in ("stop", "length")
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens and r.usage.completion_tokens <= 30
    # The same greedy request straight to an engine of our own, with the defaults of every surface: the very same
    # answer (#29: the CLI's repeat penalty was 1.1 and the API's 1.0).
    with EngineClient() as engine:
        engine.load(LoadOptions(model_path=str(bundled_model), n_ctx=CTX, n_threads=1))
        done = [e for e in engine.chat(QUESTION, SamplingOptions(temperature=0, max_tokens=30))
                if isinstance(e, Done)][0]
    assert choice.message.content == done["text"] and r.usage.completion_tokens == done["completion_tokens"]
    # And `hearth chat` as a user runs it, with its defaults.
    cli = subprocess.run([sys.executable, "-m", "app", "chat", "--temp", "0", "--threads", "1", "--ctx", str(CTX),
                          "--max-tokens", "30", "--prompt", QUESTION[0]["content"], "--json"],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["text"] == choice.message.content


def test_streamed_chunks_add_up_to_the_answer_with_usage_last(client):
    model = model_of(client)
    warm(client, model, QUESTION)
    chunks = list(client.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=24,
                                                 stream=True, stream_options={"include_usage": True}))
    whole = client.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=24)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # The request repeated the one before: the engine kept its prompt in the KV cache.
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == chunks[-1].usage.prompt_tokens - 1


def test_stop_and_seed(client):
    model = model_of(client)
    warm(client, model, QUESTION)
    full = client.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=30)
    text = full.choices[0].message.content
    stop = text.split()[len(text.split()) // 2]
    cut = client.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=30, stop=[stop])
    assert cut.choices[0].finish_reason == "stop" and cut.choices[0].message.content == text[: text.index(stop)]
    story = [{"role": "user", "content": "Tell me a story about a fox."}]
    warm(client, model, story)
    runs = [client.chat.completions.create(model=model, messages=story, temperature=1.0, seed=seed, max_tokens=25)
            .choices[0].message.content for seed in (7, 7, 8)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_completions_endpoint(client):
    r = client.completions.create(model=model_of(client), prompt="The capital of France is", max_tokens=6,
                                  temperature=0)
    assert r.object == "text_completion" and "Paris" in r.choices[0].text
    assert r.usage.completion_tokens <= 6


def test_errors_use_the_openai_envelope_and_status(server, client):
    model = model_of(client)
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=server, api_key="wrong", max_retries=0).models.list()
    missing = httpx.get(server + "/models")
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(NotFoundError) as err:
        client.chat.completions.create(model="no-such-model", messages=QUESTION)  # gpt-4o is answered (#54.4)
    assert err.value.body["code"] == "model_not_found"
    with pytest.raises(BadRequestError) as err:
        client.chat.completions.create(model=model, messages=QUESTION, n=2)
    assert err.value.body["param"] == "n"
    long = [{"role": "user", "content": "word " * (CTX + 100)}]
    with pytest.raises(BadRequestError) as err:
        client.chat.completions.create(model=model, messages=long, max_tokens=5)
    assert err.value.body["code"] == "context_length_exceeded" and str(CTX) in err.value.body["message"]


@pytest.mark.parametrize("body, status", [
    (b"{not json", 400),
    (b"\xff\xfe\xfd", 400),
    (b"[1, 2, 3]", 400),
    (b"[" * 100_000 + b"]" * 100_000, 400),
    (json.dumps({"messages": "hi"}).encode(), 400),
    (json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode(), 400),
    (json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode(), 400),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}).encode(), 400),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**30}).encode(), 400),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "top_p": float("nan")}).encode(), 400),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"x": 1}}).encode(), 400),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}).encode(), 400),
])
def test_bad_requests_get_a_400_and_the_server_lives_on(server, body, status):
    r = httpx.post(server + "/chat/completions", content=body, timeout=30,
                   headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and "\n" not in error["message"]
    assert httpx.get(server.removesuffix("/v1") + "/health").status_code == 200


def test_unknown_paths_and_methods(server):
    headers = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(server + "/nothing", headers=headers).json()["error"]["code"] == "not_found"
    assert httpx.get(server + "/chat/completions", headers=headers).status_code == 405


def test_a_client_that_disconnects_frees_the_engine_within_a_token(server, client):
    model = model_of(client)
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Write a very long story about the sea."}],
        max_tokens=4000, temperature=1.0, stream=True)
    got = 0
    for chunk in stream:
        got += 1
        if got == 5:
            break
    stream.close()
    health = server.removesuffix("/v1") + "/health"
    deadline = time.monotonic() + 10
    auth = {"Authorization": f"Bearer {KEY}"}  # (without the key, /health says only whether the server is up)
    while httpx.get(health, headers=auth).json()["busy"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not httpx.get(health, headers=auth).json()["busy"], "the engine kept generating for a client that left"
    r = client.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=5)
    assert r.usage.completion_tokens <= 5


def test_cors_preflight_answers_the_allowed_origin_only(server):
    asked = {"Origin": "http://editor.example", "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization,content-type"}
    r = httpx.options(server + "/chat/completions", headers=asked)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://editor.example"
    r = httpx.options(server + "/chat/completions", headers={**asked, "Origin": "http://evil.example"})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers


def test_listening_beyond_this_computer_needs_an_api_key():
    r = subprocess.run([sys.executable, "-m", "app", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "HEARTH_API_KEY": ""})
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("hearth: Listening on 0.0.0.0 would let anyone on the network use this model")
    assert len(r.stderr.strip().splitlines()) == 1


def test_api_errors_are_typed_for_the_client(client):
    """A raw status error still carries the envelope the client parses."""
    with pytest.raises(APIStatusError) as err:
        client.chat.completions.create(model=model_of(client), messages=[], max_tokens=5)
    assert err.value.status_code == 400 and err.value.body["param"] == "messages"
