"""Structured output: a request's `response_format` (or llama-server's `grammar`) as a llama.cpp grammar.

JSON schemas become GBNF in the engine layer (app/protocol/schema_grammar.py), which the window and the CLI
use too; here a schema the converter cannot handle is a 400 naming the field. A grammar llama.cpp cannot
parse is refused by the engine (InvalidRequest), also a 400.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from app.protocol.schema_grammar import MAX_SCHEMA_CHARS, BadSchema, check_ambiguity
from app.protocol.schema_grammar import schema_grammar as _schema_grammar
from app.server.edge.errors import invalid


def schema_grammar(schema: Any, param: str) -> str:
    """The grammar of a schema from a request; a 400 naming the field when it cannot be enforced."""
    with api_errors():
        return _schema_grammar(schema, param)


@contextmanager
def api_errors():
    """The engine's BadSchema as the API's 400 naming the field."""
    try:
        yield
    except BadSchema as exc:
        raise invalid(str(exc), exc.param) from None


def format_grammar(body: dict) -> str:
    """The grammar a request's response_format (or `grammar`) asks for; "" when it asks for none."""
    fmt = body.get("response_format")
    grammar = body.get("grammar")
    if grammar is not None and (not isinstance(grammar, str) or len(grammar) > MAX_SCHEMA_CHARS):
        raise invalid(f"'grammar' must be a GBNF grammar of at most {MAX_SCHEMA_CHARS} characters.", "grammar")
    if fmt is None:
        if grammar:
            with api_errors():  # refused before any model loads, as a schema's pattern is
                check_ambiguity(grammar, "grammar")
        return grammar or ""
    if grammar:
        raise invalid("Give either 'response_format' or 'grammar', not both.", "grammar")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return ""
    if kind == "json_object":
        from app.protocol.gbnf import converter

        return converter().JSON_GBNF
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec and "name" not in spec:
            raise invalid("'response_format.json_schema' must be an object with 'name' and 'schema'.",
                          "response_format.json_schema")
        name = spec.get("name")
        if name is not None and not isinstance(name, str):
            raise invalid("'response_format.json_schema.name' must be a string.", "response_format.json_schema.name")
        if "strict" in spec and not isinstance(spec["strict"], (bool, type(None))):
            raise invalid("'response_format.json_schema.strict' must be true or false.",
                          "response_format.json_schema.strict")
        # Without a schema OpenAI accepts any JSON object; the grammar always enforces the schema (strict or not).
        return schema_grammar(spec.get("schema", {"type": "object"}), "response_format.json_schema.schema")
    raise invalid("'response_format.type' must be 'text', 'json_object' or 'json_schema'.", "response_format")
