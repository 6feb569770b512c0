"""POST /v1/embeddings through the official OpenAI client: one unit vector per input, the model's width,
the same text the same vector, related texts closer than unrelated ones, base64 the same numbers."""

from __future__ import annotations

import base64

import gguf
import httpx
import numpy as np
import pytest
from openai import BadRequestError

from tests.server.conftest import KEY

pytestmark = pytest.mark.slow

TEXTS = ["The cat sat on the mat.", "The cat sat on the mat.", "A kitten sleeps on the rug.",
         "Quarterly revenue rose four percent."]


def n_embd(model_path) -> int:
    reader = gguf.GGUFReader(str(model_path))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    return int(reader.fields[f"{arch}.embedding_length"].parts[-1][0])


def test_vectors_are_the_models_width_and_compare_as_meaning_does(oai, model_name, bundled_model):
    r = oai.embeddings.create(model=model_name, input=TEXTS, encoding_format="float")
    vectors = np.array([d.embedding for d in r.data])
    assert [d.index for d in r.data] == [0, 1, 2, 3] and vectors.shape == (4, n_embd(bundled_model))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    cos = vectors @ vectors.T
    assert cos[0, 1] > 1 - 1e-4  # the same text, the same vector (within kernel rounding)
    assert cos[0, 2] < cos[0, 1] and cos[0, 3] < cos[0, 1]
    assert cos[0, 2] > cos[0, 3]  # a cat is closer to a kitten than to revenue
    assert r.usage.prompt_tokens == r.usage.total_tokens > 4 * len(TEXTS)


def test_the_clients_default_base64_gives_the_same_numbers(oai, model_name):
    # The openai client asks for base64 unless told otherwise and decodes it itself.
    default = oai.embeddings.create(model=model_name, input="hello world").data[0].embedding
    floats = oai.embeddings.create(model=model_name, input="hello world", encoding_format="float").data[0].embedding
    assert np.allclose(default, floats, atol=1e-6)


def test_token_arrays_and_raw_base64(api, model_name):
    body = {"model": model_name, "input": [[1, 2, 3, 4], [5, 6]], "encoding_format": "base64"}
    r = httpx.post(api + "/embeddings", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    vectors = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in data]
    assert len(vectors) == 2 and all(abs(np.linalg.norm(v) - 1) < 1e-4 for v in vectors)
    assert r.json()["usage"]["prompt_tokens"] == 6


@pytest.mark.parametrize("given", ["", [], [""], [["a"]], [[-1]], 5])
def test_empty_or_malformed_input_is_a_400(oai, model_name, given):
    with pytest.raises(BadRequestError) as err:
        oai.embeddings.create(model=model_name, input=given, encoding_format="float")
    assert err.value.body["param"] == "input"


def test_a_token_outside_the_vocabulary_and_an_input_too_long(oai, model_name):
    with pytest.raises(BadRequestError) as err:
        oai.embeddings.create(model=model_name, input=[[10**9]], encoding_format="float")
    assert "vocabulary" in err.value.body["message"]
    with pytest.raises(BadRequestError) as err:
        oai.embeddings.create(model=model_name, input="word " * 3000, encoding_format="float")
    assert err.value.body["code"] == "context_length_exceeded"


# Issue 56 B4: an embeddings request held the engine, every slot, until its last input, whoever was waiting and
# whether or not its client was still there (an hour for 2,048 inputs of 600 tokens).
TEXT = "The quick brown fox jumps over the lazy dog near the river bank. " * 40  # about 560 tokens
PLAIN = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """A server of its own: these requests hold its engine for minutes if nothing stops them."""
    from tests.server.conftest import start_server, stop_server

    proc, base = start_server(env={"HEARTH_HOME": str(tmp_path_factory.mktemp("embed_home"))})
    yield base.removesuffix("/v1")
    stop_server(proc)


def _raw_embeddings(root: str, inputs: list) -> "socket.socket":
    import json
    import socket

    host, port = root.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    body = json.dumps({"input": inputs, "encoding_format": "float"}).encode()
    sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


def _wait_busy(root: str) -> None:
    import time

    deadline = time.monotonic() + 30
    while not httpx.get(root + "/health", timeout=10).json()["busy"]:
        assert time.monotonic() < deadline, "the embeddings request never started"
        time.sleep(0.1)


def _timed_plain(root: str) -> tuple[int, float]:
    import time

    started = time.monotonic()
    r = httpx.post(root + "/v1/chat/completions", json=PLAIN, timeout=120)
    return r.status_code, time.monotonic() - started


def test_embeddings_whose_client_left_stop_and_free_the_engine(alone):
    import time

    sock = _raw_embeddings(alone, [TEXT] * 64)  # minutes of work here (seconds an input on this machine)
    _wait_busy(alone)
    time.sleep(1.0)
    sock.close()
    status, took = _timed_plain(alone)
    assert status == 200 and took < 30, took  # before: no answer in 90 s, the engine busy on
    time.sleep(0.5)
    assert httpx.get(alone + "/health", timeout=10).json()["busy"] is False


def test_a_chat_request_is_answered_between_an_embedding_requests_inputs(alone):
    sock = _raw_embeddings(alone, [TEXT] * 64)
    try:
        _wait_busy(alone)
        status, took = _timed_plain(alone)
        assert status == 200 and took < 30, took
        assert httpx.get(alone + "/health", timeout=10).json()["busy"]  # the embeddings go on meanwhile
    finally:
        sock.close()


def test_an_embeddings_request_past_its_token_bound_is_a_400_before_any_embedding(alone):
    import time

    started = time.monotonic()
    r = httpx.post(alone + "/v1/embeddings", json={"input": [TEXT] * 2048}, timeout=60)  # 5.9 MB, 1.1M tokens
    assert r.status_code == 400, r.text
    assert "300,000 tokens" in r.json()["error"]["message"]
    assert time.monotonic() - started < 30
