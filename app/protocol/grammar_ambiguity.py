"""How many ways at once llama.cpp's grammar sampler may follow a grammar, known before it runs.

llama.cpp keeps one parse stack per way the text so far can be read, and checks every candidate token against
every stack. A part that can also match nothing multiplies the ways: in `a? a? a?` a character `a` can be the
first, the second or the third, so three stacks follow it; 900 of them side by side (`^a?a?...a?$`, 1.8 KB),
or `(a|a?){16}` written 56 times, or a raw GBNF `root ::= x x ... x` with `x ::= "a" | "a"?`, made one token
take minutes, and the engine stopped answering everyone (issue 56). Counting "repeated parts that can match
nothing" per repetition missed them: they sit side by side, not inside each other.

So each part of a grammar gets a Reach, computed bottom-up:

- `first`: the stacks that a character entering it can start (the ways into it);
- `last`: the stacks still waiting inside it at a moment it could also be finished (the ways it may go on);
- `width`: the most stacks alive inside it at once;
- `nullable`: whether it can match nothing.

A sequence adds up the ways into every part a character can reach by skipping the ones that match nothing (and
the ways the part before may go on), an alternation counts as its widest branch (its stacks meet again after
it) unless a branch can take nothing (then every branch is one more way in), a repetition of something that can match nothing is that many parts side by side. The grammar's width is
an estimate, not llama.cpp's exact count (it does not compare the characters parts start with), but it grows the
way the stacks that never part do, and what it refuses is refused before any grammar runs:
as a JSON schema's pattern (app/protocol/schema_size.py), as a raw GBNF grammar (the server's `grammar` field,
app/server/structured.py), and in the engine before llama.cpp parses any grammar (app/engine/decoding/grammar.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Measured on the bundled model: `(a|a?){16}` (width 32, 33 in its JSON string) took 0.4 s a token; `(a?){16}{4}`
# (64) 4.7 s for 3 tokens; `(a|a?){8}{8}` (128) never ended. An object of 47 optional properties is 48 wide (a
# chain of optional `"," key` parts that part ways within a few characters).
MAX_PARSE_WIDTH = 48
_CAP = 1 << 40  # past the limit, how far past says nothing: keeps the sums small numbers
MAX_ROUNDS = 64  # passes over a recursive grammar's rules before its counts must have settled


@dataclass(frozen=True)
class Reach:
    nullable: bool
    first: int
    last: int
    width: int


TERMINAL = Reach(False, 1, 0, 1)  # a character, a character class, `.`
EMPTY = Reach(True, 0, 0, 0)
_UNKNOWN = Reach(False, 0, 0, 0)  # a rule not yet measured (recursion): grows pass by pass


def _c(n: int) -> int:
    return min(n, _CAP)


def sequence(parts: list[Reach]) -> Reach:
    if not parts:
        return EMPTY
    if len(parts) == 1:
        return parts[0]
    n = len(parts)
    # run[j]: the ways a character reaches from the start of part j (through the parts after it that it may skip).
    run = [0] * (n + 1)
    for j in range(n - 1, -1, -1):
        run[j] = _c(parts[j].first + (run[j + 1] if parts[j].nullable else 0))
    width = max(run[0], max(p.width for p in parts))
    for j in range(1, n):
        width = max(width, _c(parts[j - 1].last + run[j]))
    # Where it may be finished: after part i, when every part after it can match nothing.
    last = 0
    for i in range(n - 1, -1, -1):
        last = max(last, _c(parts[i].last + run[i + 1]))
        if not parts[i].nullable:
            break
    return Reach(all(p.nullable for p in parts), run[0], last, _c(width))


def alternation(branches: list[Reach]) -> Reach:
    if len(branches) == 1:
        return branches[0]
    # Branches that all take something are taken as one: llama.cpp merges the stacks that come back to the same
    # place after them, and those that begin alike part ways within a few characters (an object's optional
    # properties, `(p0 | p1 | ... | p29)?`, cost little). Beside a branch that can take nothing (`a | a?`), each
    # branch is one more way to read the same character, every time the choice comes round.
    nullable = any(b.nullable for b in branches)
    first = _c(sum(b.first for b in branches)) if nullable else max(b.first for b in branches)
    last = max(b.last for b in branches)
    width = max(first, last, max(b.width for b in branches))
    return Reach(nullable, first, last, width)


def repeated(part: Reach, low: int, high: int | None) -> Reach:
    """part{low,high}; high None: unbounded (`*`, `+`, `{n,}`), a loop that may always start once more."""
    copies = max(low, high if high is not None else low + 1, 1)
    more = high is None or high > max(low, 1)  # once it could end, another copy may still start
    if part.nullable:  # every copy can be skipped: they stand side by side
        again = copies - 1 + (high is None)  # copies that may still start once one has been read into
        first = _c(copies * part.first)
        last = _c(part.last + again * part.first)
        return Reach(True, first, last, max(part.width, first, last))
    last = _c(part.last + (part.first if more else 0))
    return Reach(low == 0, part.first, last, max(part.width, _c(part.last + part.first) if copies > 1 else 0, last))


def optional(part: Reach) -> Reach:
    return repeated(part, 0, 1)


# --- GBNF ------------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<define>::=)
  | (?P<name>[A-Za-z0-9_-]+)
  | (?P<literal>"(?:\\.|[^"\\])*")
  | (?P<cls>\[(?:\\.|[^\]\\])*\])
  | (?P<braces>\{\s*(?P<low>\d*)\s*(?P<comma>,)?\s*(?P<high>\d*)\s*\})
  | (?P<op>[()|*+?.])
""", re.X | re.S)
_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)", re.S)


class GrammarUnread(ValueError):
    """Not GBNF this reader follows: llama.cpp's own parser says why, later."""


def _tokens(grammar: str) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    pos, n = 0, len(grammar)
    while pos < n:
        m = _TOKEN.match(grammar, pos)
        if m is None:
            raise GrammarUnread(f"an unexpected {grammar[pos]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup if m.lastgroup not in ("low", "comma", "high") else "braces"
        if kind == "space":
            continue
        if kind == "literal":
            out.append(("literal", len(_ESCAPE.sub("x", m.group()[1:-1]))))
        elif kind == "braces":
            low = int(m.group("low") or 0)
            high = low if not m.group("comma") else (int(m.group("high")) if m.group("high") else None)
            out.append(("braces", (low, high)))
        elif kind == "op":
            out.append((m.group(), None))
        else:
            out.append((kind, m.group()))
    return out


def _programs(grammar: str) -> dict[str, list[tuple]]:
    """Each rule as a postfix program: ("t",) a terminal, ("e",) nothing, ("r", name), ("seq", k), ("alt", k),
    ("rep", low, high). Made without recursion: groups nest up to the engine's depth bound (2000)."""
    tokens = _tokens(grammar)
    rules: dict[str, list[tuple]] = {}
    i = 0
    while i < len(tokens):
        if tokens[i][0] != "name" or i + 1 >= len(tokens) or tokens[i + 1][0] != "define":
            raise GrammarUnread("a rule must start with NAME ::=")
        name, i = tokens[i][1], i + 2
        end = i
        while end < len(tokens) and not (tokens[end][0] == "name" and end + 1 < len(tokens)
                                         and tokens[end + 1][0] == "define"):
            end += 1
        rules[name] = _compile(tokens[i:end])
        i = end
    return rules


def _compile(tokens: list[tuple[str, object]]) -> list[tuple]:
    program: list[tuple] = []
    # Per open group: (branches finished, elements of the current branch); each count of program entries.
    stack: list[tuple[int, int]] = [(0, 0)]
    for kind, value in tokens:
        branches, elements = stack[-1]
        if kind == "(":
            stack.append((0, 0))
            continue
        if kind in (")", "|"):
            program.append(("seq", elements))
            if kind == "|":
                stack[-1] = (branches + 1, 0)
                continue
            if len(stack) == 1:
                raise GrammarUnread("an unmatched ')'")
            stack.pop()
            program.append(("alt", branches + 1))
            stack[-1] = (stack[-1][0], stack[-1][1] + 1)
            continue
        if kind in ("*", "+", "?", "braces"):
            if elements == 0:
                raise GrammarUnread(f"{kind} repeats nothing")
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(kind, value)
            program.append(("rep", low, high))
            continue
        if kind == "literal":  # its characters one after another read as one does: one way in, none left
            program.append(("t",) if value else ("e",))
        elif kind in ("cls", "."):
            program.append(("t",))
        elif kind == "name":
            program.append(("r", value))
        else:
            raise GrammarUnread(f"an unexpected {kind}")
        stack[-1] = (branches, elements + 1)
    if len(stack) != 1:
        raise GrammarUnread("an unclosed '('")
    branches, elements = stack[0]
    program.append(("seq", elements))
    program.append(("alt", branches + 1))
    return program


def _run(program: list[tuple], rules: dict[str, Reach]) -> Reach:
    values: list[Reach] = []
    for op in program:
        kind = op[0]
        if kind == "t":
            values.append(TERMINAL)
        elif kind == "e":
            values.append(EMPTY)
        elif kind == "r":
            values.append(rules.get(op[1], _UNKNOWN))
        elif kind == "rep":
            values.append(repeated(values.pop(), op[1], op[2]))
        else:
            k = op[1]
            parts = values[len(values) - k:] if k else []
            del values[len(values) - k:]
            values.append(sequence(parts) if kind == "seq" else alternation(parts))
    return values[-1]


def grammar_width(grammar: str, root: str = "root") -> int:
    """The most parse stacks a GBNF grammar may have llama.cpp follow at once (see the module's docstring).
    Raises GrammarUnread for text this reader does not follow (llama.cpp refuses or reads it itself)."""
    programs = _programs(grammar)
    order = _order(programs, root)
    measured: dict[str, Reach] = {}
    for _ in range(MAX_ROUNDS):
        changed = False
        for name in order:
            reach = _run(programs[name], measured)
            if measured.get(name) != reach:
                measured[name], changed = reach, True
        if not changed:
            break
    else:
        return _CAP  # still growing: a loop over something that can match nothing
    return max((max(r.width, r.first) for name, r in measured.items()), default=0)


def _order(programs: dict[str, list[tuple]], root: str) -> list[str]:
    """The rules reachable from root, each after the rules it names (where no loop says otherwise)."""
    if root not in programs:
        return list(programs)
    order, seen = [], {root}
    stack: list[tuple[str, list[str]]] = [(root, _names(programs[root]))]
    while stack:
        name, pending = stack[-1]
        while pending and (pending[-1] in seen or pending[-1] not in programs):
            pending.pop()
        if pending:
            child = pending.pop()
            seen.add(child)
            stack.append((child, _names(programs[child])))
        else:
            stack.pop()
            order.append(name)
    return order


def _names(program: list[tuple]) -> list[str]:
    return [op[1] for op in program if op[0] == "r"]


def ambiguity_problem(grammar: str) -> str | None:
    """Why llama.cpp could not follow this GBNF grammar in reasonable time, as a clause; None when it can (or when
    the text is not GBNF this reader follows: llama.cpp's parser then says what is wrong)."""
    try:
        width = grammar_width(grammar)
    except GrammarUnread:
        return None
    return width_problem(width)


def width_problem(width: int) -> str | None:
    if width <= MAX_PARSE_WIDTH:
        return None
    said = "more than a trillion" if width >= _CAP else f"{width:,}"
    return (f"one character could be read {said} ways at once (parts that can also match nothing, side by side or "
            f"repeated: llama.cpp follows every way); the limit is {MAX_PARSE_WIDTH}")
