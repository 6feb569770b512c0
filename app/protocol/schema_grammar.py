"""JSON schemas as llama.cpp grammars, for every client: the API's structured output and tool calls, and the
calls the window and the CLI force for MCP tools.

Schemas become GBNF through llama-cpp-python's own converter (llama_cpp.llama_grammar), so that decoding can
only produce text that parses and fits the schema. A schema the converter cannot handle raises BadSchema
naming the field it came from; the API server turns that into a 400, the CLI into one sentence.
"""

from __future__ import annotations

import copy
from typing import Any

from app.core.errors import InvalidRequest
from app.protocol.grammar_ambiguity import ambiguity_problem
from app.protocol.schema_size import SchemaTooBig, bounded_rules, check_schema_size, relax_bounds

# JSON forbids raw control characters inside strings; the converter shipped with llama-cpp-python 0.3.36
# allows them (`[^"\\]`), and Python's json.loads then rejects the answer. llama.cpp's own converter
# excludes them, as here.
JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
MAX_SCHEMA_CHARS = 100_000


class BadSchema(InvalidRequest):
    """A schema (or tool list) that cannot be enforced; `param` names where it came from (an API field)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def schema_rules(schema: Any, name: str, param: str, prop_order: list[str] | None = None,
                 parts: list[tuple[str, dict]] = ()):
    """A SchemaConverter holding the rules for `schema` under rule `name` ("" for root); BadSchema if it cannot.
    `schema` is the caller's copy: the converter rewrites its $refs, and bounds too large to enforce are left out
    of it (app/protocol/schema_size.py, relax_bounds).

    parts: (name, sub-schema) of schemas inside `schema` whose $refs point into themselves (a tool's
    parameters with their own $defs, as Pydantic writes them). The converter rewrites refs in place."""
    import json

    SchemaConverter = _converter_class()

    if not isinstance(schema, dict) and not isinstance(schema, bool):
        raise BadSchema(f"'{param}' must be a JSON schema object.", param)
    converter = SchemaConverter(prop_order={p: i for i, p in enumerate(prop_order or [])}, allow_fetch=False,
                                dotall=False, raw_pattern=False)
    # The converter's rules table, counted as it fills: a conversion stops where its grammar grows too big.
    converter._rules = bounded_rules(converter._rules)
    try:
        if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
            raise BadSchema(f"'{param}' is longer than {MAX_SCHEMA_CHARS} characters.", param)
        relax_bounds(schema)  # an upper bound too large to limit anything is left out, not refused
        check_schema_size(schema, param)  # before the converter writes anything: milliseconds, not gigabytes
        for url, part in parts:
            converter.resolve_refs(part, url)
        converter.visit(converter.resolve_refs(schema if isinstance(schema, dict) else {}, "request"), name)
    except RecursionError:
        raise BadSchema(f"'{param}' is nested too deeply.", param) from None
    except SchemaTooBig as exc:
        text = str(exc)
        raise BadSchema(text if text.startswith("'") else f"'{param}' asks for a grammar too big to enforce "
                        f"({text}).", param) from None
    except BadSchema:
        raise
    except Exception as exc:  # the converter raises whatever its checks hit: asserts, KeyErrors, ValueErrors
        reason = str(exc).strip().rstrip(".").replace("\n", " ")[:200] or type(exc).__name__
        raise BadSchema(f"'{param}' is not a JSON schema this server can enforce: {reason}.", param) from None
    if "char" in converter._rules:
        converter._rules["char"] = JSON_CHAR
    return converter


# The keys llama-cpp-python's converter reads in a schema without a "type"; one with none of them (only a
# description, a title, a default: Claude Code's Workflow tool has `"args": {"description": ...}`) allows any JSON
# value, but the converter refuses it ("Unrecognized schema").
_UNTYPED_READS = frozenset({"$ref", "oneOf", "anyOf", "allOf", "const", "enum", "properties", "additionalProperties",
                            "items", "prefixItems", "pattern", "format"})
_CONVERTER: Any = None


def _converter_class():
    """llama-cpp-python's SchemaConverter, taking a schema that constrains nothing as any JSON value."""
    global _CONVERTER
    if _CONVERTER is None:
        from app.protocol.gbnf import converter

        module = converter()

        class SchemaConverter(module.SchemaConverter):
            def visit(self, schema, name):
                if isinstance(schema, dict) and schema and schema.get("type") is None \
                        and not _UNTYPED_READS.intersection(schema):
                    rule_name = name + "-" if name in module.RESERVED_NAMES else name or "root"
                    return self._add_rule(rule_name, self._add_primitive("value", module.PRIMITIVE_RULES["value"]))
                return super().visit(schema, name)

        _CONVERTER = SchemaConverter
    return _CONVERTER


def schema_copy(schema: Any, param: str) -> Any:
    """A copy the converter may change (it rewrites $refs in place); BadSchema for one nested too deeply to copy."""
    try:
        return copy.deepcopy(schema)
    except RecursionError:
        raise BadSchema(f"'{param}' is nested too deeply.", param) from None


def schema_grammar(schema: Any, param: str) -> str:
    grammar = schema_rules(schema_copy(schema, param), "", param).format_grammar()
    check_ambiguity(grammar, param)  # its parts side by side, which no one pattern shows
    return grammar


def check_ambiguity(grammar: str, param: str) -> None:
    """BadSchema naming `param` for a grammar llama.cpp could not follow in reasonable time (app/protocol/
    grammar_ambiguity.py), before any engine runs it."""
    problem = ambiguity_problem(grammar)
    if problem:
        raise BadSchema(f"'{param}' is a grammar llama.cpp cannot enforce in reasonable time: {problem}. Simplify "
                        "it.", param)
