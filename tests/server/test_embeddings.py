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
