"""Structured output: a request's `response_format` (or llama-server's `grammar`) as a llama.cpp grammar.

JSON schemas become GBNF through llama-cpp-python's own converter (llama_cpp.llama_grammar), so that
decoding can only produce text that parses and fits the schema. A schema the converter cannot handle is
a 400 naming the field; a grammar llama.cpp cannot parse is refused by the engine (InvalidRequest), also
a 400.
"""

from __future__ import annotations

import copy
from typing import Any

from app.server.errors import ApiError, invalid
from app.server.schema_size import SchemaTooBig, bounded_rules, check_schema_size

# JSON forbids raw control characters inside strings; the converter shipped with llama-cpp-python 0.3.36
# allows them (`[^"\\]`), and Python's json.loads then rejects the answer. llama.cpp's own converter
# excludes them, as here.
JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
MAX_SCHEMA_CHARS = 100_000


def schema_rules(schema: Any, name: str, param: str, prop_order: list[str] | None = None,
                 parts: list[tuple[str, dict]] = ()):
    """A SchemaConverter holding the rules for `schema` under rule `name` ("" for root); 400 if it cannot.

    parts: (name, sub-schema) of schemas inside `schema` whose $refs point into themselves (a tool's
    parameters with their own $defs, as Pydantic writes them). The converter rewrites refs in place."""
    import json

    from llama_cpp.llama_grammar import SchemaConverter

    if not isinstance(schema, dict) and not isinstance(schema, bool):
        raise invalid(f"'{param}' must be a JSON schema object.", param)
    converter = SchemaConverter(prop_order={p: i for i, p in enumerate(prop_order or [])}, allow_fetch=False,
                                dotall=False, raw_pattern=False)
    # The converter's rules table, counted as it fills: a conversion stops where its grammar grows too big.
    converter._rules = bounded_rules(converter._rules)
    try:
        if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
            raise invalid(f"'{param}' is longer than {MAX_SCHEMA_CHARS} characters.", param)
        check_schema_size(schema, param)  # before the converter writes anything: milliseconds, not gigabytes
        for url, part in parts:
            converter.resolve_refs(part, url)
        converter.visit(converter.resolve_refs(schema if isinstance(schema, dict) else {}, "request"), name)
    except RecursionError:
        raise invalid(f"'{param}' is nested too deeply.", param) from None
    except SchemaTooBig as exc:
        text = str(exc)
        raise invalid(text if text.startswith("'") else f"'{param}' asks for a grammar too big to enforce "
                      f"({text}).", param) from None
    except ApiError:
        raise
    except Exception as exc:  # the converter raises whatever its checks hit: asserts, KeyErrors, ValueErrors
        reason = str(exc).strip().rstrip(".").replace("\n", " ")[:200] or type(exc).__name__
        raise invalid(f"'{param}' is not a JSON schema this server can enforce: {reason}.", param) from None
    if "char" in converter._rules:
        converter._rules["char"] = JSON_CHAR
    return converter


def schema_copy(schema: Any, param: str) -> Any:
    """A copy the converter may change (it rewrites $refs in place); 400 for one nested too deeply to copy."""
    try:
        return copy.deepcopy(schema)
    except RecursionError:
        raise invalid(f"'{param}' is nested too deeply.", param) from None


def schema_grammar(schema: Any, param: str) -> str:
    return schema_rules(schema_copy(schema, param), "", param).format_grammar()


def format_grammar(body: dict) -> str:
    """The grammar a request's response_format (or `grammar`) asks for; "" when it asks for none."""
    fmt = body.get("response_format")
    grammar = body.get("grammar")
    if grammar is not None and (not isinstance(grammar, str) or len(grammar) > MAX_SCHEMA_CHARS):
        raise invalid(f"'grammar' must be a GBNF grammar of at most {MAX_SCHEMA_CHARS} characters.", "grammar")
    if fmt is None:
        return grammar or ""
    if grammar:
        raise invalid("Give either 'response_format' or 'grammar', not both.", "grammar")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return ""
    if kind == "json_object":
        from llama_cpp.llama_grammar import JSON_GBNF

        return JSON_GBNF
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
