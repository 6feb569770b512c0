"""How big a JSON schema's grammar will be, known before llama-cpp-python's converter builds it.

The converter writes repetition out in full: `minItems: N` becomes N copies of the item's rule name,
`maxLength: N` N nested optional groups, a pattern's `x{N}` N copies of `x`. A request of a few bytes
(`{"type": "array", "minItems": 1000000000}`) so asked for gigabytes, and the server process grew until
the kernel's OOM killer ended it. The schema's own size bounds nothing.

So every repetition count in the schema (minItems, maxItems, minLength, maxLength, minContains,
maxContains, and the `{n,m}` quantifiers of its patterns) is weighed by the text each copy can cost: the
rule name it repeats, which grows with the path of property names leading to it, or the pattern's own
length for a repeated literal. Their sum is an upper bound on what the converter writes for them, taken in
one pass over the schema without recursion. Upper bounds too large to limit anything a model writes (maxLength,
maxItems, maxContains above MAX_ENFORCED_UPPER) are first left out of the grammar (relax_bounds): they cost
copies as any other count, and refusing them refused whole tool lists over one generous limit. A lower bound
cannot be left out (it says what the answer must hold). A schema whose bound exceeds what llama.cpp will take anyway
(MAX_GRAMMAR_CHARS) is refused at once; the converter then also counts what it really writes
(BoundedRules), so nothing the estimate overlooks can grow past the limit either.

Size is not the only cost. A small grammar can be so ambiguous that llama.cpp's grammar sampler follows an
exploding number of parse stacks on every token (`^(a|a?){30}{30}$` is 900 copies of a choice that can also
match nothing: one token took minutes in llama_grammar_reject_candidates_for_stack). So each pattern is
parsed (check_pattern) and refused when its groups nest too deeply, when its nested repetition counts
multiply past MAX_PATTERN_REPEAT, or when one character could be read more ways at once than
MAX_PARSE_WIDTH (app/protocol/grammar_ambiguity.py counts them: parts that can match nothing side by side add
up, `a?a?a?` as much as `(a?){3}`). The whole grammar is counted again where it is used, and the engine's
watchdog (app/backends/supervisor.py) still ends a step that runs too long.
"""

from __future__ import annotations

import math
import re
from typing import Any

from app.protocol.gbnf import MAX_GRAMMAR_CHARS, MAX_GRAMMAR_DEPTH
from app.protocol.grammar_ambiguity import TERMINAL, Reach, alternation, repeated, sequence, width_problem

COUNT_KEYS = ("minItems", "maxItems", "minLength", "maxLength", "minContains", "maxContains")
# An upper bound above this is left out of the grammar (relax_bounds). The converter writes `maxLength: N` as N
# nested optional groups, and llama.cpp parses groups at most MAX_GRAMMAR_DEPTH deep: Claude Code's Workflow tool
# has a string of "maxLength": 524288, which asked for 37,766,098 characters of grammar and made every request
# carrying that tool a 400. So large a bound limits nothing a model writes in one call; the rest stays enforced.
MAX_ENFORCED_UPPER = MAX_GRAMMAR_DEPTH // 2
UPPER_KEYS = ("maxLength", "maxItems", "maxContains")
# What one copy costs beyond its rule name: separators, spaces, parentheses and a rule suffix ("-item12").
COPY_OVERHEAD = 24
_QUANTIFIER = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


MAX_PATTERN_DEPTH = 12  # groups and quantifiers nested inside each other
MAX_PATTERN_REPEAT = 10_000  # the product of the repetition counts around any part of a pattern


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


class _Part:
    """What check_pattern knows of a parsed piece of a regex (bottom-up, without recursion)."""

    __slots__ = ("depth", "product", "reach")

    def __init__(self, reach: Reach = TERMINAL):
        self.depth, self.product, self.reach = 0, 1, reach


def _sequence(parts: list[_Part]) -> _Part:
    out = _Part(sequence([p.reach for p in parts]))
    for p in parts:
        out.depth = max(out.depth, p.depth)
        out.product = max(out.product, p.product)
    return out


def _alternation(branches: list[_Part]) -> _Part:
    if len(branches) == 1:
        return branches[0]
    out = _sequence(branches)
    out.reach = alternation([b.reach for b in branches])
    return out


def _quantified(part: _Part, low: int, high: int | None) -> _Part:
    """part{low,high} (high None: unbounded, as * and + are: the converter writes a loop, not copies)."""
    copies = max(low, high if high is not None else low + 1, 1)
    out = _Part(repeated(part.reach, low, high))
    out.depth = part.depth + 1
    out.product = min(part.product * copies, MAX_GRAMMAR_CHARS)
    return out


_BRACES = re.compile(r"\{\s*(\d*)\s*(,\s*(\d*)\s*)?\}")


def pattern_measure(pattern: str) -> _Part:
    """Parse a JSON-schema pattern (the regex subset llama-cpp-python's converter takes) into its measures."""
    stack: list[tuple[list[_Part], list[_Part]]] = [([], [])]  # per open group: (finished branches, current one)
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        branches, seq = stack[-1]
        if c == "(":
            i += 1
            if pattern.startswith("?:", i):
                i += 2
            stack.append(([], []))
            continue
        if c == ")":
            if len(stack) == 1:
                raise ValueError("an unmatched ')'")
            stack.pop()
            group = _alternation(branches + [_sequence(seq)])
            group.depth += 1
            stack[-1][1].append(group)
            i += 1
            continue
        if c == "|":
            branches.append(_sequence(seq))
            seq.clear()
            i += 1
            continue
        if c in "*+?{":
            low, high, size = 0, None, 1
            if c == "{":
                m = _BRACES.match(pattern, i)
                if not m:
                    seq.append(_Part())  # a literal brace, as the converter reads one
                    i += 1
                    continue
                low = int(m.group(1) or 0)
                high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                size = m.end() - i
            elif c == "+":
                low = 1
            elif c == "?":
                high = 1
            if not seq:
                raise ValueError(f"'{c}' repeats nothing")
            low, high = min(low, MAX_GRAMMAR_CHARS), None if high is None else min(high, MAX_GRAMMAR_CHARS)
            seq[-1] = _quantified(seq[-1], low, high)
            i += size
            if i < n and pattern[i] == "?":  # lazy: the same grammar
                i += 1
            continue
        if c == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            seq.append(_Part())
            i = j + 1
            continue
        if c == "\\":
            seq.append(_Part())
            i += 2
            continue
        if c in "^$":
            i += 1
            continue
        seq.append(_Part())
        i += 1
    if len(stack) != 1:
        raise ValueError("an unclosed '('")
    branches, seq = stack[0]
    return _alternation(branches + [_sequence(seq)])


def check_pattern(pattern: str, where: str) -> None:
    """Raise SchemaTooBig for a pattern whose grammar llama.cpp could not follow in reasonable time."""
    try:
        m = pattern_measure(pattern)
    except ValueError:
        return  # not a regex the converter reads: it refuses it itself, with its own reason
    reason = None
    too_wide = width_problem(max(m.reach.width, m.reach.first))
    if m.depth > MAX_PATTERN_DEPTH:
        reason = f"its groups and repetitions nest {m.depth} deep; the limit is {MAX_PATTERN_DEPTH}"
    elif too_wide:
        reason = too_wide
    elif m.product > MAX_PATTERN_REPEAT:
        reason = f"its nested repetition counts multiply to {m.product:,}; the limit is {MAX_PATTERN_REPEAT:,}"
    if reason:
        raise SchemaTooBig(f"{where} is a pattern llama.cpp cannot enforce in reasonable time: {reason}")


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
                check_pattern(pattern, f"its {path}.pattern" if path else "its pattern")
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


def relax_bounds(schema: Any) -> list[str]:
    """Leave out, in place, every maxLength, maxItems and maxContains above MAX_ENFORCED_UPPER (see there); the
    JSON paths of those left out. The schema must be the caller's own copy (the converter changes it anyway)."""
    relaxed: list[str] = []
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:  # without recursion: a schema may nest deeper than Python's stack
        node, path = stack.pop()
        if isinstance(node, dict):
            for key in UPPER_KEYS:
                value = node.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and not value <= MAX_ENFORCED_UPPER:
                    del node[key]  # (`not <=`: NaN too)
                    relaxed.append(f"{path}.{key}" if path else key)
            stack.extend((child, f"{path}.{key}" if path else str(key)) for key, child in node.items()
                         if isinstance(child, (dict, list)))
        elif isinstance(node, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(node) if isinstance(child, (dict, list)))
    return relaxed


def check_schema_size(schema: Any, param: str) -> None:
    """Raise SchemaTooBig, naming the part, for a schema whose grammar would be too big to use."""
    try:
        bound, where = grammar_size_bound(schema)
    except SchemaTooBig as exc:  # a pattern too ambiguous (check_pattern)
        raise SchemaTooBig(f"'{param}': {exc}. Simplify the pattern.") from None
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
