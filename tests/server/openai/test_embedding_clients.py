"""Embedding clients that send OpenAI's fixed model names, against a real `hearth serve` (#54.4): `llm embed -m
3-small` (PyPI llm 0.36) and LangChain's OpenAIEmbeddings() with its default model, text-embedding-ada-002
(langchain-openai 1.8.1). Each is answered by the loaded model, with the vectors the server gives for the same
text under the model's own name.

OpenAIEmbeddings() by default tokenizes with tiktoken and sends OpenAI's token ids, which another model reads as
other words (or refuses: most ids are past the bundled model's 49,152): such a request is a 400 that says what to
send instead. LangChain's own setting for servers other than OpenAI's sends the text."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.server.conftest import KEY

pytestmark = pytest.mark.slow

HEADERS = {"Authorization": f"Bearer {KEY}"}
TEXTS = ["a cat sat on the mat", "the stock market fell today"]


def own_vectors(api: str, model_name: str, texts: list[str]) -> list[list[float]]:
    r = httpx.post(api + "/embeddings", headers=HEADERS, json={"model": model_name, "input": texts}, timeout=120)
    return [d["embedding"] for d in r.json()["data"]]


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < 1e-5


def test_llm_embed_3_small(api, model_name, tmp_path):
    pytest.importorskip("llm", reason="the test extra installs llm")
    env = {**os.environ, "LLM_USER_PATH": str(tmp_path), "OPENAI_BASE_URL": api, "OPENAI_API_KEY": KEY}
    done = subprocess.run([sys.executable, "-m", "llm", "embed", "-m", "3-small", "-c", TEXTS[0]], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert close(json.loads(done.stdout), own_vectors(api, model_name, TEXTS[:1])[0])


def test_langchains_openai_embeddings_with_its_default_model(api, model_name):
    langchain_openai = pytest.importorskip("langchain_openai", reason="the test extra installs langchain-openai")
    embeddings = langchain_openai.OpenAIEmbeddings(base_url=api, api_key=KEY, check_embedding_ctx_length=False)
    assert embeddings.model == "text-embedding-ada-002"
    documents = embeddings.embed_documents(TEXTS)
    own = own_vectors(api, model_name, TEXTS)
    assert all(close(a, b) for a, b in zip(documents, own))
    assert close(embeddings.embed_query(TEXTS[1]), own[1])


def test_openais_token_ids_for_openais_model_are_refused_in_a_sentence(api, model_name):
    # What OpenAIEmbeddings() sends by default: a list of tiktoken ids (cl100k_base) for each text.
    r = httpx.post(api + "/embeddings", headers=HEADERS, timeout=120,
                   json={"model": "text-embedding-ada-002", "input": [[64, 8415, 7731, 389, 279, 5634]]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    assert "check_embedding_ctx_length=False" in r.json()["error"]["message"]
    # The model's own token ids under its own name are read as before.
    r = httpx.post(api + "/embeddings", headers=HEADERS, json={"model": model_name, "input": [[64, 8415]]},
                   timeout=120)
    assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) > 10
