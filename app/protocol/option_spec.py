"""How an option is declared: once, on its field of LoadOptions or SamplingOptions (app/protocol/messages.py).

A field's declaration carries its type and default (the dataclass), and, in its metadata, everything a client
builds from it: the command-line flag and help (app/commands/options.py), the window's spin box (label, tip,
range, step), the range the engine accepts, and whether a preference is remembered. A field no user sets says
why instead (`internal`). app/protocol/option_fields.py reads these declarations; no second table exists.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

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


def fits(kind: Any, value: Any) -> bool:
    """Whether a value read from JSON fits a field's declared type (int | None, list[str], dict[int, float], ...)."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return any(fits(part, value) for part in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    if kind is int:
        return isinstance(value, int)
    return isinstance(value, origin or kind) if isinstance(origin or kind, type) else False
