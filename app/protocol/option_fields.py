"""The load and sampling options a user sets, as every client that offers them reads them.

Each option is declared once, on its field of LoadOptions or SamplingOptions (app/protocol/messages.py, with
app/protocol/option_spec.py's `option` and `internal`); the tables here are read from those declarations. The
command line (app/commands/options.py) builds its flags from them and the window's panels
(app/ui/chat/sampling_panel.py, app/ui/models/load_settings.py) their spin boxes, so a flag, a widget and an
options field cannot drift apart. The clients build options with `with_values`, which starts from complete
options, so a field that a client has no control for keeps its value instead of falling back to the default.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from app.core.errors import InvalidRequest
from app.protocol.messages import LOGICAL_CORES, LoadOptions, SamplingOptions
from app.protocol.option_spec import OptionField, described, internals

__all__ = ["LOGICAL_CORES", "LOAD_FIELDS", "SAMPLING_FIELDS", "NOT_SET_BY_USERS", "OptionField"]

LOAD_FIELDS = described(LoadOptions)
SAMPLING_FIELDS = described(SamplingOptions)
_INTERNAL = {**internals(LoadOptions), **internals(SamplingOptions)}
# Fields of the options that no client offers as a setting, and why (declared on each field).
NOT_SET_BY_USERS = {name: spec.why for name, spec in _INTERNAL.items()}


def undescribed(cls) -> list[str]:
    """Fields of an options class declared neither as an option nor as internal (with its reason)."""
    described_names = {f.name for f in (*LOAD_FIELDS, *SAMPLING_FIELDS)} | set(NOT_SET_BY_USERS)
    return [f.name for f in fields(cls) if f.name not in described_names]


def kept_fields(table: tuple[OptionField, ...], shown: set[str]) -> list[str]:
    """The remembered fields of a table that a panel showing `shown` has no control for: it must carry them."""
    return [f.name for f in table if f.remembered and f.name not in shown]


def with_values(base: Any, values: dict[str, Any]):
    """`base` with the given fields changed; every other field keeps base's value (never a default)."""
    unknown = set(values) - {f.name for f in fields(base)}
    if unknown:
        raise TypeError(f"{type(base).__name__} has no field {', '.join(sorted(unknown))}")
    return replace(base, **values)


# name -> (its OptionField or None, lowest, highest accepted): what check_options judges, built once.
_RANGES = {f.name: (f, *(f.valid or (f.low, f.high))) for f in (*LOAD_FIELDS, *SAMPLING_FIELDS) if f.low is not None}
_RANGES.update({name: (None, *spec.valid) for name, spec in _INTERNAL.items() if spec.valid is not None})


def accepted(name: str) -> tuple[float, float]:
    """The lowest and highest values the engine accepts for an option, as its field declares them: what an API
    request's field of the same meaning is checked against, so that the bound is written once."""
    _, low, high = _RANGES[name]
    return low, high


class OptionError(InvalidRequest):
    """An option out of its range: the asker's to fix (an API client gets a 400)."""


def check_options(options: Any) -> None:
    """Refuse a LoadOptions or SamplingOptions value outside its field's range, in one sentence.

    The one place where options are judged: the command line calls it as it builds them, and the engine
    host on every load and request, so the window, the CLI and the API refuse the same values the same way.
    """
    for spec in fields(options):
        if spec.name not in _RANGES:
            continue
        value = getattr(options, spec.name)
        if value is None:
            continue  # "decide for me" (threads, draft length)
        field, low, high = _RANGES[spec.name]
        name = (field.flag if field and field.flag else spec.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OptionError(f"{name} must be a number, not {value!r}.")
        if not low <= value <= high:
            if spec.name == "n_threads":
                raise OptionError(f"{name} {value}: this computer has {LOGICAL_CORES} CPU threads; use 1 to "
                                  f"{LOGICAL_CORES}.")
            raise OptionError(f"{name} must be between {_number(low)} and {_number(high)}, not {_number(value)}.")
    if hasattr(options, "h2o_heavy"):
        check_h2o_budgets(options.h2o_heavy, options.h2o_recent)
    if getattr(options, "lookup", False) and getattr(options, "draft_model", None):
        raise OptionError("--lookup and --draft-model are two ways of drafting; choose one.")


# Said at an h2o load (app/engine/context/h2o.py) and in the load settings' flash attention box (app/ui/models): one sentence.
H2O_FLASH_OFF = ("The h2o context policy reads the attention scores, which flash attention never computes, so "
                 "flash attention is off for this model.")


def check_h2o_budgets(heavy: float, recent: float) -> None:
    """The h2o policy's two shares must leave room: an eviction that keeps everything makes none."""
    if heavy + recent > 0.9:
        raise OptionError(f"--h2o-heavy {heavy:g} and --h2o-recent {recent:g} keep {heavy + recent:.0%} of the "
                          "context at an eviction; together they must keep at most 90%, so that room is made.")


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else f"{value:,}".replace(",", "")
