"""How an option is declared: once, on its field of LoadOptions or SamplingOptions (app/protocol/messages.py), or
of ServeOptions and its Limits (app/server/options.py).

A field's declaration carries its type and default (the dataclass), and, in its metadata, everything a client
builds from it: the command-line flag and help (app/commands/options.py), the window's spin box (label, tip,
range, step), the range the engine accepts or the flag takes, and whether a preference is remembered. A field no
user sets says why instead (`internal`). app/protocol/option_fields.py reads these declarations; no second table
exists.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from typing import Annotated, Any, Literal

OPTION = "option"  # the metadata key of a field a user sets
INTERNAL = "internal"  # the metadata key of a field no user sets: why not


@dataclass(frozen=True)
class OptionField:
    name: str  # the attribute of LoadOptions / SamplingOptions (filled in from the field)
    flag: str | None  # the command-line flag; None: not on the command line
    help: str = ""
    metavar: str | None = None
    dest: str | None = None  # argparse's attribute when it is not `name` (--threads -> threads)
    negate: bool = False  # an on/off field whose flag turns it off (--no-mmap)
    repeat: bool = False  # a list field whose flag may be given several times (--stop)
    choices: tuple[str, ...] | None = None
    remembered: bool = True  # False: a decision for one load (--ignore-fit), not a preference to keep
    # The window's spin box, where it has one: label, tooltip, range and step.
    label: str | None = None
    tip: str = ""
    low: float | None = None
    high: float | None = None
    step: float | None = None
    # The values the engine accepts, where wider than the spin box's range (API clients may ask for more).
    valid: tuple[float, float] | None = None
    # A flag's range as the command line checks it while it reads it (a server's flags, which no spin box shows).
    bound: "Bound | None" = None
    scale: float = 1  # the field holds the flag's value times this (--max-body-mb -> bytes)
    nargs: str | None = None  # a list field whose one flag takes several values (--tools A B)
    also: tuple[str, ...] = ()  # the flag's other names (--draft-model, --draft)
    required: bool = False  # a flag the command cannot do without, though the field has a default (--text)
    parse: Any = None  # how the flag's text becomes the value, where not by the field's type ("A,B" -> a list)

    @property
    def arg(self) -> str:
        return self.dest or self.name


@dataclass(frozen=True)
class Internal:
    why: str  # why no client offers it as a setting
    valid: tuple[float, float] | None = None  # the values the engine accepts, checked all the same


def _field(default: Any, default_factory: Any, metadata: dict):
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def option(default: Any = MISSING, flag: str | None = None, help: str = "", metavar: str | None = None, *,
           default_factory: Any = MISSING, **spec: Any):
    """A field a user sets: its default, then its flag, help and metavar, and the rest of OptionField by name."""
    return _field(default, default_factory, {OPTION: OptionField("", flag, help, metavar, **spec)})


def internal(default: Any = MISSING, why: str = "", *, default_factory: Any = MISSING,
             valid: tuple[float, float] | None = None):
    """A field no client offers as a setting, and why."""
    return _field(default, default_factory, {INTERNAL: Internal(why, valid)})


def described(cls) -> tuple[OptionField, ...]:
    """The fields of an options class that users set, in their declared order."""
    return tuple(replace(f.metadata[OPTION], name=f.name) for f in fields(cls) if OPTION in f.metadata)


def internals(cls) -> dict[str, Internal]:
    return {f.name: f.metadata[INTERNAL] for f in fields(cls) if INTERNAL in f.metadata}


@dataclass(frozen=True)
class Bound:
    """A number flag's range: a value outside is one sentence naming the flag and the value, said as the command
    line is read, before any model loads (app/commands/options.py)."""
    lowest: float
    highest: float | None = None
    above: bool = False  # the lowest itself is refused
    takes: str = ""  # what the flag takes, in words

    def holds(self, value: float) -> bool:
        """nan and inf never do (`nan <= 0` is False: a plain comparison let nan in)."""
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return (value > self.lowest if self.above else value >= self.lowest) and \
            (self.highest is None or value <= self.highest)


def count(lowest: int, what: str) -> Bound:
    """A count: `count(1, "runs")` takes 1 or more runs."""
    return Bound(lowest, takes=f"{lowest} or more {what}")


POSITIVE_SECONDS = Bound(0, above=True, takes="a number of seconds more than 0")


@dataclass(frozen=True)
class Range:
    """Annotated[int, Range(low, high)]: the values a number may take."""
    low: float
    high: float


def required(f) -> bool:
    """Whether a dataclass field has no default: a value that leaves it out is incomplete."""
    return f.default is MISSING and f.default_factory is MISSING


_HINTS: dict[type, dict[str, Any]] = {}


def hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types, resolved once (the modules declare them as strings)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
    return _HINTS[cls]


def fits(kind: Any, value: Any, deep: bool = True) -> bool:
    """Whether a value read from JSON fits a declared type, strictly (true is no int, 1 no str): int | None,
    list[str], dict[str, X], Literal[...], Annotated[int, Range(...)], a dataclass (an object whose keys fit its
    fields; its other keys are left alone), Any. deep=False: a list or a dict is judged by its own type, its items
    not looked at (an options dict's fields: app/protocol/messages.py's from_dict)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        bounds = [a for a in args[1:] if isinstance(a, Range)]
        return fits(args[0], value, deep) and all(b.low <= value <= b.high for b in bounds)
    if origin in (typing.Union, types.UnionType):
        return any(fits(part, value, deep) for part in args)
    if origin is Literal:
        return any(type(value) is type(choice) and value == choice for choice in args)
    if kind is Any:
        return True
    if kind is type(None):
        return value is None
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    if origin is list and deep and args:
        return isinstance(value, list) and all(fits(args[0], item) for item in value)
    if origin is dict and deep and args:  # JSON's keys are strings
        return isinstance(value, dict) and all(isinstance(k, str) and fits(args[1], v) for k, v in value.items())
    if is_dataclass(kind):
        return isinstance(value, dict) and all(
            fits(hints(kind)[f.name], value[f.name], deep) if f.name in value else not required(f)
            for f in fields(kind))
    return isinstance(value, origin or kind) if isinstance(origin or kind, type) else False
