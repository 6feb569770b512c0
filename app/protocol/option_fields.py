"""The load and sampling options a user sets, described once for every client that offers them.

The command line (app/commands/options.py) builds its flags from these tables and the window's panels
(app/ui/chat/sampling_panel.py, app/ui/models/load_settings.py) their spin boxes, so a flag, a widget and
an options field cannot drift apart. Every field of LoadOptions and SamplingOptions is either described
here or listed in NOT_SET_BY_USERS with the reason; tests/engine/test_option_fields.py checks that, and the
clients build options with `with_values`, which starts from complete options, so a field that a client
has no control for keeps its value instead of falling back to the default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any

from app.core.errors import InvalidRequest
from app.protocol.messages import CONTEXT_POLICIES, FLASH_ATTN, KV_TYPES, RUNTIMES

LOGICAL_CORES = os.cpu_count() or 1


@dataclass(frozen=True)
class OptionField:
    name: str  # the attribute of LoadOptions / SamplingOptions
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


LOAD_FIELDS = (
    OptionField("n_threads", "--threads", "CPU threads (default: physical cores)", "N", dest="threads", low=1,
                high=LOGICAL_CORES),
    OptionField("n_gpu_layers", "--gpu-layers", "layers to offload to the GPU (-1: all)", "N", dest="gpu_layers",
                low=-1, high=100000),
    OptionField("runtime", "--runtime", "engine runtime (default auto: a GPU runtime that sees a real GPU, else cpu; "
                "hearth runtimes list shows them)", choices=RUNTIMES),
    OptionField("n_ctx", "--ctx", "context size in tokens (default 4096)", "N", dest="ctx", low=64, high=1 << 24),
    OptionField("n_batch", "--batch", "prompt batch size (default 512)", "N", dest="batch", low=1, high=1 << 16),
    OptionField("use_mmap", "--no-mmap", "read the whole model into memory instead of mapping it", negate=True),
    OptionField("use_mlock", "--mlock", "lock the model in RAM"),
    OptionField("kv_type", "--kv-type", "KV cache type (default f16)", choices=KV_TYPES),
    OptionField("flash_attn", "--flash-attn", "flash attention (default auto)", choices=FLASH_ATTN),
    OptionField("draft_model", "--draft-model", "small GGUF with the same vocabulary for speculative decoding",
                "PATH"),
    OptionField("lookup", "--lookup", "speculative decoding with n-gram drafts from the context"),
    OptionField("draft_max", "--draft-max", "longest draft (default: adaptive)", "N", low=0, high=64),
    OptionField("context_policy", "--context-policy", "what happens when the context is full (default: window)",
                choices=CONTEXT_POLICIES),
    OptionField("sink_tokens", "--sink-tokens", "attention-sink tokens kept (default 4)", "N", low=0, high=4096),
    OptionField("keep_system", "--no-keep-system", "let the window slide over the system prompt too", negate=True),
    OptionField("window_fraction", "--window-fraction",
                "share of the movable context dropped each time the window slides (default 0.5)", "F",
                low=0.01, high=0.99),
    OptionField("h2o_heavy", "--h2o-heavy",
                "h2o policy (experimental): share of the context kept for the most-attended tokens at an eviction "
                "(default 0.25)", "F", low=0.0, high=0.9),
    OptionField("h2o_recent", "--h2o-recent",
                "h2o policy (experimental): share of the context kept as the most recent tokens (default 0.25)", "F",
                low=0.0, high=0.9),
    OptionField("chat_template", "--chat-template",
                "chat template: auto (default: the model's own, else chosen by its vocabulary), a llama.cpp built-in "
                "name (chatml, gemma, llama3, phi3, mistral-v7, ...), plain, or a Jinja file", "NAME|FILE"),
    OptionField("ignore_fit", "--ignore-fit",
                "load even when the memory estimate says the model does not fit (may be very slow)",
                remembered=False),
    OptionField("step_timeout_s", "--step-timeout",
                "end and restart the engine when one step (a token or a prompt batch) takes longer than this; the "
                "request is told why (default: 50 times the step's time measured at load, at least 10 s)", "SECONDS",
                dest="step_timeout", low=0.1, high=86400.0),
)

SAMPLING_FIELDS = (
    OptionField("temperature", "--temp", "temperature (0: greedy)", "T", dest="temp", label="Temperature",
                tip="0 = always the most likely token (greedy)", low=0.0, high=2.0, step=0.05),
    OptionField("top_k", "--top-k", "", "K", label="Top-K", tip="keep only the K most likely tokens (0 = off)",
                low=0, high=1000, valid=(0, 1 << 20)),
    OptionField("top_p", "--top-p", "", "P", label="Top-P",
                tip="keep the most likely tokens up to this total probability", low=0.0, high=1.0, step=0.01),
    OptionField("min_p", "--min-p", "", "P", label="Min-P",
                tip="drop tokens less likely than this share of the best one", low=0.0, high=1.0, step=0.01),
    OptionField("repeat_penalty", "--repeat-penalty", "", "R", label="Repeat penalty",
                tip="discourage repeating recent tokens", low=0.5, high=2.0, step=0.01, valid=(0.0, 10.0)),
    OptionField("repeat_last_n", "--repeat-last-n", "recent tokens the repeat penalty looks at (default 64)", "N",
                low=-1, high=1 << 20),
    OptionField("max_tokens", "--max-tokens", "", "N", label="Max tokens", tip="longest answer in tokens",
                low=1, high=32768, valid=(1, 1 << 24)),
    OptionField("seed", "--seed", "random seed (-1: random)", "S", label="Seed",
                tip="-1 = a new random seed per answer", low=-1, high=2**31 - 1),
    OptionField("stop", "--stop", "stop string (repeatable)", "TEXT", repeat=True),
)

# Ranges of fields that no client offers (see NOT_SET_BY_USERS), checked all the same.
OTHER_RANGES = {"n_parallel": (1, 64), "frequency_penalty": (-2.0, 2.0), "presence_penalty": (-2.0, 2.0)}

# Fields of the options that no client offers as a setting, and why.
NOT_SET_BY_USERS = {
    "model_path": "the model itself: --model, or the file chosen in the window",
    "extra_bufts": "decided per machine by the extra-buffer-types probe (app/engine/probes/probe.py)",
    "n_parallel": "a server's choice: hearth serve --parallel N (the window and hearth chat answer one at a time)",
    "ignore_eos": "for benchmarks, which must always generate max_tokens",
    "frequency_penalty": "an OpenAI request parameter, set per request by API clients (app/server)",
    "presence_penalty": "an OpenAI request parameter, set per request by API clients (app/server)",
    "logit_bias": "an OpenAI request parameter (token ids), set per request by API clients (app/server)",
    "grammar": "built per request by the API server from response_format or tools (app/server)",
    "prediction": "a request's own text (API 'prediction', hearth chat --predict, the window's regenerate)",
    "given": "which settings the user gave, filled in by each surface (flags given, fields sent, boxes changed)",
}


def undescribed(cls) -> list[str]:
    """Fields of an options class that neither table describes nor NOT_SET_BY_USERS explains."""
    described = {f.name for f in (*LOAD_FIELDS, *SAMPLING_FIELDS)} | set(NOT_SET_BY_USERS)
    return [f.name for f in fields(cls) if f.name not in described]


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
_RANGES.update({name: (None, low, high) for name, (low, high) in OTHER_RANGES.items()})


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
