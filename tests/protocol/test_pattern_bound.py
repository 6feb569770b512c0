"""A JSON-schema pattern whose grammar llama.cpp could not follow in reasonable time is refused before any
grammar is built (app/protocol/schema_size.py); the patterns people write pass."""

from __future__ import annotations

import pytest

from app.protocol.schema_grammar import BadSchema, schema_grammar

FIELD = "response_format.json_schema.schema"


@pytest.mark.parametrize("pattern", [
    r"^[a-z]{2,30}$", r"^(\d{1,3}\.){3}\d{1,3}$", r"^(foo|bar){100}$", r"^(-?\d+)(,-?\d+){0,20}$",
    r"^[^@]+@[^@]+\.[a-z]{2,}$", r"^(a|a?){16}$", r"^\+?[0-9 ()-]{7,20}$", r"^(ab|ac){100}$",
])
def test_ordinary_patterns_pass(pattern):
    assert schema_grammar({"type": "string", "pattern": pattern}, FIELD)


@pytest.mark.parametrize("pattern, reason", [
    ("^(a|a?){30}{30}$", "1,800 ways"),  # issue 48: minutes in llama_grammar_reject_candidates_for_stack
    ("^(a?){16}{4}$", "64 ways"),  # measured: 4.7 s for 3 tokens
    ("^(a|a?){8}{8}$", "128 ways"),  # measured: never ended
    # Issue 56: parts side by side, not nested, wedged the engine for 63-232 s: each was counted alone.
    ("^" + "a?" * 900 + "$", "900 ways"),
    ("^" + "(a|a?){16}" * 56 + "$", "1,792 ways"),
    ("(" * 14 + "a" + ")" * 14, "nest 14 deep"),
    ("^(a{100}){200}$", "multiply to 20,000"),
])
def test_exploding_patterns_are_refused_naming_the_field(pattern, reason):
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}}
    with pytest.raises(BadSchema) as caught:
        schema_grammar(schema, FIELD)
    message = str(caught.value)
    assert message.startswith(f"'{FIELD}': its properties.code.pattern is a pattern") and reason in message, message
    assert caught.value.param == FIELD
