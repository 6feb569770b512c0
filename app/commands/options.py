"""Command-line flags built from the options' declarations, and the values they give back.

The load and sampling options (app/protocol/option_fields.py's tables), serve's (app/server/options.py) and each
benchmark's (app/bench/*.py) declare their flags on their fields, so every settable field has its flag and every
flag reaches its field.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path

from app.core.library.bundled import bundled_model_path
from app.core.errors import BadArgument
from app.protocol.option_fields import LOAD_FIELDS, SAMPLING_FIELDS, OptionError, OptionField, check_options
from app.protocol.option_spec import OPTION, POSITIVE_SECONDS, Bound, count, described
from app.protocol.messages import LoadOptions, SamplingOptions

_TYPES = {"int": int, "float": float, "str": str}
# With --model: what every command that loads a model takes. (A projector, --mmproj, is for the commands that read
# images and sounds, which take every load option; no benchmark measures media yet.)
_MODEL_FIELDS = ("n_threads", "n_gpu_layers")


class _Given(argparse.Action):
    """Stores a flag's value and remembers that the user gave it (SamplingOptions.given): a setting left out takes
    the model's recommendation, never the flag's default in its place."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, "given_settings", {*getattr(namespace, "given_settings", ()), self.dest})


def _add(p: argparse.ArgumentParser, field: OptionField, cls) -> None:
    declared = {f.name: f for f in fields(cls)}[field.name]
    default = declared.default if declared.default_factory is MISSING else declared.default_factory()
    kwargs: dict = {"dest": field.arg}
    if cls is SamplingOptions and not field.repeat and not isinstance(default, bool):
        kwargs["action"] = _Given
    if field.help:
        kwargs["help"] = field.help.replace("{default}", _shown(default, field.scale))
    if field.negate:
        kwargs["action"] = "store_false"
    elif isinstance(default, bool):
        kwargs["action"] = "store_true"
    elif field.repeat:
        kwargs.update(action="append", default=[], metavar=field.metavar)
    elif field.nargs:
        kwargs.update(nargs=field.nargs, default=[], metavar=field.metavar)
    else:
        if default is MISSING or field.required:
            kwargs["required"] = True  # a field without a default is a flag the command cannot do without
        if default is not MISSING:
            kwargs["default"] = default if field.scale == 1 or default is None else default / field.scale
        if field.choices:
            kwargs["choices"] = field.choices
        else:
            kind = field.parse or _TYPES.get(str(declared.type).split("|")[0].strip(), str)
            kwargs.update(type=float if field.scale != 1 else kind, metavar=field.metavar)
        if field.bound is not None:
            kwargs.update(action=_Bounded, bound=field.bound)
    if not field.flag.startswith("-"):  # a positional argument: its name is its dest, and it is always given
        kwargs = {key: value for key, value in kwargs.items() if key in ("help", "metavar", "type")}
    p.add_argument(field.flag, *field.also, **kwargs)


def _shown(default, scale: float) -> str:
    """A default as its flag takes it: 10 for a 10 MB field in bytes, 8080, auto."""
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return str(default)
    return f"{default / scale:g}"


def add_declared_args(p: argparse.ArgumentParser, cls) -> None:
    """A flag for each option an options class declares (app/protocol/option_spec.py), and for those of the
    options classes it holds (ServeOptions' limits)."""
    by_name = {option.name: option for option in described(cls)}
    for f in fields(cls):
        if f.name in by_name:
            _add(p, by_name[f.name], cls)
        elif is_dataclass(f.default_factory):
            add_declared_args(p, f.default_factory)


def declared_options(args: argparse.Namespace, cls):
    """The options class built from add_declared_args' flags."""
    values = _values(args, described(cls))
    nested = {f.name: declared_options(args, f.default_factory) for f in fields(cls)
              if OPTION not in f.metadata and is_dataclass(f.default_factory)}
    return cls(**values, **nested)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="PATH", help="GGUF model file (default: the bundled SmolLM2-135M)")
    for field in LOAD_FIELDS:
        if field.name in _MODEL_FIELDS:
            _add(p, field, LoadOptions)


def add_load_args(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    for field in LOAD_FIELDS:
        if field.name not in _MODEL_FIELDS:
            _add(p, field, LoadOptions)


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    for field in SAMPLING_FIELDS:
        _add(p, field, SamplingOptions)


def model_path(args: argparse.Namespace) -> str:
    """--model as a path, or else as a library name (what `hearth models list`, inspect and fit accept)."""
    given = getattr(args, "model", None)
    if not given:
        return str(bundled_model_path())
    path = Path(given).expanduser()
    if path.exists() or len(path.parts) > 1 or path.suffix.lower() == ".gguf":
        return str(given)  # a path: a missing one is "not found", not "no such name"
    from app.core.library import resolve

    return resolve(given).path


def _values(args: argparse.Namespace, table: tuple[OptionField, ...]) -> dict:
    return {f.name: _value(f, getattr(args, f.arg)) for f in table}


def _value(field: OptionField, given):
    if field.repeat or field.nargs:
        return list(given)
    if field.scale != 1 and given is not None:
        return max(1, int(given * field.scale))  # a flag's "more than 0" is at least one of the field's units
    return given


def load_options(args: argparse.Namespace) -> LoadOptions:
    options = LoadOptions(model_path=model_path(args), **_values(args, LOAD_FIELDS))
    _checked(options)  # before any engine starts: the sentence comes at once
    if options.n_gpu_layers or options.runtime not in ("auto", "cpu"):
        _say_runtime(options)
    if options.draft_model:
        _say_draft(options)
    return options


def _say_draft(options: LoadOptions) -> None:
    """A draft model that cannot pay is said before the load, as the window's load settings say it: the load
    still holds it (the flag was given), but the engine will answer without drafting."""
    import sys

    from app.core.library.draft_pay import DRAFT_COST_LIMIT, draft_verdict
    from app.core.errors import HearthError

    try:
        verdict = draft_verdict(options.model_path, options.draft_model)
    except (HearthError, OSError):  # an unreadable file: the load's own check says so in its sentence
        return
    if not verdict.pays:
        print(f"hearth: --draft-model {Path(options.draft_model).name}: a draft token costs about "
              f"{verdict.ratio:.0%} of a step of {Path(options.model_path).name} ({verdict.how}); above "
              f"{DRAFT_COST_LIMIT:.0%} drafting cannot pay, so the engine will answer without it and its memory is "
              "held for nothing. Leave --draft-model out, or choose a smaller draft.", file=sys.stderr)


def _say_runtime(options: LoadOptions) -> None:
    """--gpu-layers without a GPU, or a --runtime that cannot be had, is not an error, but never silently
    ignored: one sentence, and the model runs on the CPU."""
    import sys

    from app.backends.runtime_choice import choose

    chosen = choose(options.runtime)  # kept for this process: the engine starts on the same answer
    if chosen.note:
        print(f"hearth: {chosen.note}", file=sys.stderr)
    elif options.n_gpu_layers and not chosen.devices:
        print(f"hearth: --gpu-layers {options.n_gpu_layers}: no engine runtime here sees a GPU (hearth runtimes "
              "list), so the model runs on the CPU.", file=sys.stderr)


def sampling_options(args: argparse.Namespace) -> SamplingOptions:
    given = getattr(args, "given_settings", set())
    options = SamplingOptions(**_values(args, SAMPLING_FIELDS),
                              given=[f.name for f in SAMPLING_FIELDS if f.arg in given])
    _checked(options)
    return options


def _checked(options) -> None:
    """The option tables' checks, whose sentences name the flags: on the command line a value out of range is a
    bad argument (exit status 2, as argparse's own), not a failure of the command."""
    try:
        check_options(options)
    except OptionError as exc:
        raise BadArgument(str(exc)) from None


# A number flag's range (a declared field's `bound`, or `**within(1, takes="1 or more runs")` on a flag of no options
# class) is checked as the command line is read: a value outside is one sentence naming the flag and the value,
# before any model loads (a bad argument: exit status 2, as argparse's own refusals; app/cli.py). The load and
# sampling options' ranges are option_fields' to check.
class _Bounded(argparse.Action):
    def __init__(self, option_strings, dest, bound: Bound, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.bound = bound

    def __call__(self, parser, namespace, value, option_string=None):
        if not self.bound.holds(value):
            shown = f"{value:g}" if isinstance(value, float) else value
            raise BadArgument(f"{option_string} takes {self.bound.takes}, not {shown}.")
        setattr(namespace, self.dest, value)


def within(lowest: float, highest: float | None = None, *, above: bool = False, takes: str) -> dict:
    """add_argument's keywords for a number flag with its range."""
    return {"action": _Bounded, "bound": Bound(lowest, highest, above, takes)}


def at_least(lowest: int, what: str) -> dict:
    """A count: `**at_least(1, "runs")` takes 1 or more runs."""
    return {"action": _Bounded, "bound": count(lowest, what)}


SECONDS = {"action": _Bounded, "bound": POSITIVE_SECONDS}
