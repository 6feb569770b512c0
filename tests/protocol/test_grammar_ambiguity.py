"""The ways at once llama.cpp's grammar sampler may follow a GBNF grammar (app/protocol/grammar_ambiguity.py): the
grammars that wedged the engine for minutes (issue 56) are refused before any runs, counted side by side and not
only nested; the grammars Hearth writes for schemas and tools, and JSON's own, pass."""

from __future__ import annotations

import time

import pytest

from app.protocol.gbnf import converter
from app.protocol.grammar_ambiguity import MAX_PARSE_WIDTH, ambiguity_problem, grammar_width
from app.protocol.schema_grammar import schema_grammar
from app.protocol.tool_calls import tool_grammar, tool_use

# What the converter wrote for ^(a|a?){30}{30}$ (tests/server/edge/test_watchdog.py had it wedge the engine).
WEDGE = ('root ::= "\\"" ' + "r2 " * 30 + '"\\""\nr1 ::= ("a" | "a"?)\nr2 ::= ' + " ".join(["r1"] * 30))


@pytest.mark.parametrize("grammar, ways", [
    ("root ::= " + " ".join(["x"] * 300) + '\nx ::= "a" | "a"?', "600 ways"),  # issue 56: raw GBNF, side by side
    ("root ::= " + '"a"? ' * 900, "900 ways"),
    (WEDGE, "1,801 ways"),
])
def test_grammars_that_wedge_llama_cpp_are_refused(grammar, ways):
    problem = ambiguity_problem(grammar)
    assert problem and ways in problem and f"the limit is {MAX_PARSE_WIDTH}" in problem, problem


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city"], "properties": {"city": {"type": "string", "maxLength": 30},
                                                           "unit": {"enum": ["c", "f"]}, "days": {"type": "integer"}}}}}


@pytest.mark.parametrize("grammar", [
    converter().JSON_GBNF,
    schema_grammar({"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "maxLength": 30}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
        "when": {"type": "string", "format": "date-time"}, "kind": {"anyOf": [{"type": "string"}, {"type": "null"}]}}},
        "schema"),
    schema_grammar({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(40)}}, "schema"),
    schema_grammar({"type": "string", "pattern": "^(a|a?){16}$"}, "schema"),  # 0.4 s a token: still fine
    tool_grammar(tool_use({"tools": [WEATHER] * 1 + [{"type": "function", "function": {"name": f"t{i}", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}} for i in range(20)], "tool_choice": "auto"})),
    'root ::= value\nvalue ::= "[" (value ("," value)*)? "]" | [0-9]+',  # recursive
    "root ::= " + "(" * 2000 + '"a"' + ")" * 2000,  # as deep as the engine takes: no recursion here
])
def test_the_grammars_hearth_writes_pass(grammar):
    assert ambiguity_problem(grammar) is None, (grammar_width(grammar), grammar[:300])


def test_a_big_grammar_is_counted_in_well_under_a_second():
    schema = {"type": "object", "required": [f"p{i}" for i in range(400)],
              "properties": {f"p{i}": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 8}
                             for i in range(400)}}
    grammar = schema_grammar(schema, "schema")
    assert len(grammar) > 100_000
    started = time.monotonic()
    assert ambiguity_problem(grammar) is None
    assert time.monotonic() - started < 2.0  # generous: a loaded 2-core machine
