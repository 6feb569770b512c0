"""Structured output through the official OpenAI client: response_format json_schema and json_object,
streamed and not, on both endpoints; every answer parses and fits its schema; a schema or grammar the
server cannot enforce is a 400 that names it."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from openai import BadRequestError

from tests.server.conftest import KEY

pytestmark = pytest.mark.slow

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "languages"],
          "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0},
                         "languages": {"type": "array", "items": {"enum": ["en", "fr", "de", "ja"]},
                                       "minItems": 1, "maxItems": 3}}}
ORDER = {"type": "object", "additionalProperties": False, "required": ["item", "quantity", "express"],
         "properties": {"item": {"enum": ["tea", "coffee", "cake"]}, "quantity": {"type": "integer"},
                        "express": {"type": "boolean"}, "note": {"type": "string", "maxLength": 20}}}
ASK_PERSON = [{"role": "user", "content": "Invent a person who speaks some languages."}]


def schema_format(name: str, schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.mark.parametrize("schema, seed", [(PERSON, 1), (PERSON, 2), (ORDER, 3), (ORDER, 4)])
def test_sampled_answers_parse_and_fit_the_schema(oai, model_name, schema, seed):
    r = oai.chat.completions.create(model=model_name, messages=ASK_PERSON, temperature=1.0, seed=seed,
                                    max_tokens=120, response_format=schema_format("answer", schema))
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    jsonschema.validate(json.loads(choice.message.content), schema)


def test_streamed_structured_answer_parses(oai, model_name):
    chunks = list(oai.chat.completions.create(model=model_name, messages=ASK_PERSON, temperature=0,
                                              max_tokens=120, stream=True,
                                              response_format=schema_format("person", PERSON)))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(text), PERSON)


def test_json_object_is_an_object(oai, model_name):
    r = oai.chat.completions.create(
        model=model_name, temperature=0, max_tokens=80, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Reply with a JSON object with the key 'ok' set to true."}])
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_completions_take_a_response_format_and_a_grammar(oai, model_name):
    r = oai.completions.create(model=model_name, prompt="Order:", max_tokens=60, temperature=0,
                               extra_body={"response_format": schema_format("order", ORDER)})
    jsonschema.validate(json.loads(r.choices[0].text), ORDER)
    r = oai.completions.create(model=model_name, prompt="Is the sky blue? Answer:", max_tokens=5, temperature=0,
                               extra_body={"grammar": 'root ::= " yes" | " no"'})
    assert r.choices[0].text in (" yes", " no")


@pytest.mark.parametrize("response_format, param", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wizard"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(("}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "https://example.com/s.json"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": "person"}, "response_format.json_schema"),
    ({"type": "yaml"}, "response_format"),
])
def test_schemas_the_server_cannot_enforce_are_a_400(oai, model_name, response_format, param):
    with pytest.raises(BadRequestError) as err:
        oai.chat.completions.create(model=model_name, messages=ASK_PERSON, max_tokens=5,
                                    response_format=response_format)
    assert err.value.body["param"] == param and "\n" not in err.value.body["message"]


def test_a_grammar_llama_cpp_refuses_is_a_400_with_its_reason(api, oai, model_name):
    with pytest.raises(BadRequestError) as err:
        oai.chat.completions.create(model=model_name, messages=ASK_PERSON, max_tokens=5,
                                    extra_body={"grammar": "root ::= answer"})
    assert "Undefined rule identifier 'answer'" in err.value.body["message"]
    # The engine did not die of it.
    health = httpx.get(api.removesuffix("/v1") + "/health", headers={"Authorization": f"Bearer {KEY}"})
    assert health.status_code == 200
    assert oai.chat.completions.create(model=model_name, messages=ASK_PERSON, max_tokens=2).usage.completion_tokens <= 2
