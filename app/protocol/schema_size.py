"""How big a JSON schema's grammar will be, known before llama-cpp-python's converter builds it.

The converter writes repetition out in full: `minItems: N` becomes N copies of the item's rule name,
`maxLength: N` N nested optional groups, a pattern's `x{N}` N copies of `x`. A request of a few bytes
(`{"type": "array", "minItems": 1000000000}`) so asked for gigabytes, and the server process grew until
the kernel's OOM killer ended it. The schema's own size bounds nothing.

So every repetition count in the schema (minItems, maxItems, minLength, maxLength, minContains,
maxContains, and the `{n,m}` quantifiers of its patterns) is weighed by the text each copy can cost: the
rule name it repeats, which grows with the path of property names leading to it, or the pattern's own
length for a repeated literal. Their sum is an upper bound on what the converter writes for them, taken in
one pass over the schema without recursion. A schema whose bound exceeds what llama.cpp will take anyway
(MAX_GRAMMAR_CHARS) is refused at once; the converter then also counts what it really writes
(BoundedRules), so nothing the estimate overlooks can grow past the limit either.
"""

from __future__ import annotations

import math
import re
from typing import Any

from app.protocol.gbnf import MAX_GRAMMAR_CHARS

COUNT_KEYS = ("minItems", "maxItems", "minLength", "maxLength", "minContains", "maxContains")
# What one copy costs beyond its rule name: separators, spaces, parentheses and a rule suffix ("-item12").
COPY_OVERHEAD = 24
_QUANTIFIER = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


class SchemaTooBig(ValueError):
    """The grammar a schema asks for would exceed what llama.cpp takes; the message says which part."""


def _count(value: Any) -> int:
    """A repetition count as the converter would use it (0 for what it would refuse anyway)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return MAX_GRAMMAR_CHARS + 1
    return min(max(int(value), 0), MAX_GRAMMAR_CHARS + 1)  # past the limit, how far past says nothing


def _pattern_cost(pattern: str) -> int:
    """An upper bound on the text a pattern's quantifiers write: each copy at most the whole pattern."""
    total = 0
    for low, high in _QUANTIFIER.findall(pattern):
        copies = min(max(int(low or 0), int(high or 0)), MAX_GRAMMAR_CHARS + 1)
        total += copies * (len(pattern) + COPY_OVERHEAD)
    return total


def grammar_size_bound(schema: Any) -> tuple[int, str]:
    """(an upper bound on the characters its repetitions write, the JSON path of the largest one)."""
    total, worst, worst_path = 0, 0, "the schema"
    stack: list[tuple[Any, str, int]] = [(schema, "", 0)]  # (node, path, length of the rule name there)
    while stack:
        node, path, name_len = stack.pop()
        if isinstance(node, dict):
            cost = 0
            for key in COUNT_KEYS:
                if key in node:
                    cost = max(cost, _count(node[key]) * (name_len + COPY_OVERHEAD))
            pattern = node.get("pattern")
            if isinstance(pattern, str):
                cost += _pattern_cost(pattern)
            total += cost
            if cost > worst:
                worst, worst_path = cost, path or "the schema"
            for key, child in node.items():
                if isinstance(child, (dict, list)):
                    stack.append((child, f"{path}.{key}" if path else str(key), name_len + len(str(key)) + 1))
        elif isinstance(node, list):
            for i, child in enumerate(node):
                if isinstance(child, (dict, list)):
                    stack.append((child, f"{path}[{i}]", name_len + len(str(i)) + 1))
    return total, worst_path


def check_schema_size(schema: Any, param: str) -> None:
    """Raise SchemaTooBig, naming the part, for a schema whose grammar would be too big to use."""
    bound, where = grammar_size_bound(schema)
    if bound > MAX_GRAMMAR_CHARS:
        raise SchemaTooBig(f"'{param}' asks for a grammar too big to enforce (its repetition counts, at "
                           f"{where}, would write about {bound:,} characters; the limit is {MAX_GRAMMAR_CHARS:,}). "
                           "Use smaller minItems/maxItems/minLength/maxLength or pattern counts.")


def bounded_rules(initial: dict, limit: int = MAX_GRAMMAR_CHARS) -> dict:
    """A rules table for the converter, holding its initial rules, that refuses to grow past `limit` characters."""
    rules = BoundedRules(limit)
    for key, value in initial.items():
        rules[key] = value
    return rules


class BoundedRules(dict):
    """The converter's `_rules`: counts the text of every rule stored, and stops the conversion past a limit."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.chars = limit, 0

    def __setitem__(self, key, value) -> None:
        old = self.get(key)
        self.chars += len(key) + len(value) - (len(key) + len(old) if old is not None else 0)
        if self.chars > self.limit:
            raise SchemaTooBig(f"the grammar grew past {self.limit:,} characters")
        super().__setitem__(key, value)
