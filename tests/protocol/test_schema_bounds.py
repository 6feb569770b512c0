"""An upper bound too large to limit anything a model writes is left out of the grammar, and the rest of the schema
stays enforced (#54.2). Claude Code's Workflow tool has a string of "maxLength": 524288: its grammar would have
been 37,766,098 characters, and every request carrying the tool, in every dialect, was a 400. A lower bound that
large still cannot be enforced, and is still refused."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from app.protocol.schema_grammar import BadSchema, schema_grammar
from app.protocol.schema_size import MAX_ENFORCED_UPPER
from app.protocol.tool_calls import tool_grammar, tool_use

CLAUDE_CODE = Path(__file__).parents[1] / "server" / "recorded" / "claude_code_first_request.json"


def rule(grammar: str, name: str) -> str:
    return re.search(rf"^{re.escape(name)} ::= (.*)$", grammar, re.M).group(1)


def test_a_huge_upper_bound_is_left_out_and_the_others_kept():
    schema = {"type": "object", "required": ["script", "name", "tags"], "properties": {
        "script": {"type": "string", "maxLength": 524288},
        "name": {"type": "string", "maxLength": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 100_000}}}
    grammar = schema_grammar(schema, "response_format.json_schema.schema")
    assert len(grammar) < 2000
    assert rule(grammar, "script-kv").endswith(" string") and rule(grammar, "string") == '"\\"" char* "\\"" space'
    assert rule(grammar, "name").count("char") == 5  # at most five characters, as asked
    assert rule(grammar, "tags") == '"[" space string "," space string ("," space string)* "]" space'  # two or more
    assert schema["properties"]["script"]["maxLength"] == 524288  # the caller's schema is left as it was


def test_bounds_up_to_the_limit_are_enforced():
    at_limit = schema_grammar({"type": "string", "maxLength": MAX_ENFORCED_UPPER}, "schema")
    assert at_limit.count("(char") == MAX_ENFORCED_UPPER
    assert "(char" not in schema_grammar({"type": "string", "maxLength": MAX_ENFORCED_UPPER + 1}, "schema")


@pytest.mark.parametrize("schema", [
    {"type": "string", "minLength": 524288},
    {"type": "array", "items": {"type": "string"}, "minItems": 10**9},
    {"type": "string", "minLength": 524288, "maxLength": 524288},
])
def test_a_huge_lower_bound_is_still_refused(schema):
    with pytest.raises(BadSchema) as caught:
        schema_grammar(schema, "response_format.json_schema.schema")
    assert "too big to enforce" in str(caught.value)


def test_claude_codes_tools_make_a_grammar_in_milliseconds():
    tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                               "parameters": t["input_schema"]}}
             for t in json.loads(CLAUDE_CODE.read_text())["body"]["tools"]]
    assert any('"maxLength": 524288' in json.dumps(t) for t in tools)
    for choice in ("auto", "required"):
        started = time.perf_counter()
        grammar = tool_grammar(tool_use({"tools": tools, "tool_choice": choice}))
        assert time.perf_counter() - started < 1
        assert len(grammar) < 100_000
        # ListAgents' filters keep their "maxLength": 256.
        assert max(line.count("(char") for line in grammar.splitlines()) == 256
    # Workflow's "args" has only a description: any JSON value, as JSON Schema says (the converter refused it).
    assert "value ::= object | array | string | number | boolean | null" in grammar
