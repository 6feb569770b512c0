"""#54.1, #54.4, #54.7: clients users bring keep working. A field Hearth has never heard of is left out and named in
the Hearth-Ignored-Fields header (the Codex CLI's client_metadata failed its first request); OpenAI's and
Anthropic's fixed model names are answered by the loaded model, said in the model field and the Hearth-Model header
(`llm embed -m 3-small`, LangChain's OpenAIEmbeddings()); the endpoints answer without /v1 too; and
`--strict-fields` / `--strict-models` keep the refusals for those who want them."""

from __future__ import annotations

import httpx
import pytest
from openai import OpenAI

from tests.server.conftest import KEY, start_server, stop_server

HEADERS = {"Authorization": f"Bearer {KEY}"}


def test_metadata_fields_are_taken_and_unknown_fields_left_out_and_named(api, model_name):
    root = api[:-len("/v1")]
    ask = {"model": model_name, "max_tokens": 4, "temperature": 0}
    # Codex's first request carries client_metadata: metadata, taken without a word.
    r = httpx.post(api + "/responses", headers=HEADERS, timeout=120,
                   json={**{k: v for k, v in ask.items() if k != "max_tokens"}, "max_output_tokens": 16,
                         "input": "Hi", "client_metadata": {"installation_id": "x"}})
    assert r.status_code == 200, r.text
    assert "hearth-ignored-fields" not in r.headers
    # A field no version of Hearth has seen: answered, and named, on every dialect.
    for path, body in (("/chat/completions", {**ask, "messages": [{"role": "user", "content": "Hi"}]}),
                       ("/completions", {**ask, "prompt": "Hi"}),
                       ("/responses", {"model": model_name, "input": "Hi", "max_output_tokens": 16}),
                       ("/messages", {**ask, "messages": [{"role": "user", "content": "Hi"}]})):
        r = httpx.post(api + path, headers=HEADERS, timeout=120, json={**body, "from_the_future": 1, "zeta": {}})
        assert r.status_code == 200, (path, r.text)
        assert r.headers["hearth-ignored-fields"] == "from_the_future, zeta", path
    # Without /v1, as llama-server answers: a base URL set without it works.
    assert httpx.get(root + "/models", headers=HEADERS).json()["data"][0]["id"]
    r = httpx.post(root + "/chat/completions", headers=HEADERS, timeout=120,
                   json={**ask, "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
    assert httpx.post(root + "/chat/completions", json=ask).status_code == 401  # the key holds there too


def test_fixed_model_names_are_answered_by_the_loaded_model(api, model_name):
    client = OpenAI(base_url=api, api_key=KEY, max_retries=0, timeout=120)
    embedded = client.embeddings.with_raw_response.create(model="text-embedding-3-small", input="a cat")
    assert embedded.http_response.headers["hearth-model"] == f"{model_name} (asked for text-embedding-3-small)"
    assert embedded.parse().model == model_name and len(embedded.parse().data[0].embedding) > 10
    chat = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=4)
    assert chat.model == model_name
    # A name that is neither the library's nor a fixed one is still a 404 naming it.
    r = httpx.post(api + "/chat/completions", headers=HEADERS,
                   json={"model": "no-such-model", "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_strict_fields_and_strict_models_refuse(tmp_path, model_name):
    proc, base = start_server("--strict-fields", "--strict-models", env={"HEARTH_HOME": str(tmp_path)})
    try:
        r = httpx.post(base + "/chat/completions", timeout=60,
                       json={"model": model_name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                             "from_the_future": 1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "from_the_future"
        r = httpx.post(base + "/embeddings", timeout=60, json={"model": "text-embedding-3-small", "input": "a"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    finally:
        assert stop_server(proc)


def test_the_servers_sampling_flags_answer_what_a_client_leaves_out(tmp_path):
    """Claude Code and Codex send no temperature and no length: `hearth serve --temp 0 --max-tokens 5` is how their
    user chooses, as with llama-server's flags. Greedy (temperature 0): the same question gets the same answer; the
    length is the flag's on the OpenAI, Responses and Ollama endpoints, and a request's own still wins."""
    proc, base = start_server("--temp", "0", "--max-tokens", "5", env={"HEARTH_HOME": str(tmp_path)})
    try:
        client = OpenAI(base_url=base, api_key="none")
        model = client.models.list().data[0].id
        question = [{"role": "user", "content": "Tell me a long story about a cat who lives on a boat."}]
        first, again = (client.chat.completions.create(model=model, messages=question) for _ in range(2))
        assert first.usage.completion_tokens == 5 and first.choices[0].finish_reason == "length"
        assert first.choices[0].message.content == again.choices[0].message.content
        assert client.responses.create(model=model, input=question).usage.output_tokens == 5
        ollama = httpx.post(base[:-len("/v1")] + "/api/chat", timeout=120,
                            json={"model": model, "messages": question, "stream": False}).json()
        assert ollama["eval_count"] == 5 and ollama["message"]["content"] == first.choices[0].message.content
        longer = client.chat.completions.create(model=model, messages=question, max_tokens=9)
        assert longer.usage.completion_tokens == 9
        assert longer.choices[0].message.content.startswith(first.choices[0].message.content)  # greedy, longer
    finally:
        stop_server(proc)
