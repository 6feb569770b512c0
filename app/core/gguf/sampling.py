"""A model's own recommended sampling: the GGUF keys `general.sampling.*`.

Model makers write them (llama.cpp's LLAMA_MODEL_META_KEY_SAMPLING_*: Qwen3 and others ship a temperature
and top-p they tested), and llama.cpp's own tools apply them the way Hearth does: each replaces the default of
a setting the user did not give, and never a setting the user gave. Every surface (CLI, window, both APIs)
sends which settings the user gave, and the engine applies the rest from here (app/engine/process/session.py), so one
request gets one answer wherever it comes from.

Qt-free and engine-free: the keys are read through a `meta(key) -> str | None` function, the loaded model's
(Runtime.meta) or a file's header (gguf_info).
"""

from __future__ import annotations

from typing import Callable

PREFIX = "general.sampling."

# GGUF key (after the prefix) -> (the sampling setting it recommends, its type, lowest, highest accepted).
# A value outside the range (a broken or hostile file) is left out, never applied.
APPLIED = {
    "temp": ("temperature", float, 0.0, 2.0),
    "top_k": ("top_k", int, 0, 1 << 20),
    "top_p": ("top_p", float, 0.0, 1.0),
    "min_p": ("min_p", float, 0.0, 1.0),
    "penalty_repeat": ("repeat_penalty", float, 0.0, 10.0),
    "penalty_last_n": ("repeat_last_n", int, -1, 1 << 20),
}
# The settings a model may recommend, by SamplingOptions field name.
RECOMMENDABLE = tuple(name for name, *_ in APPLIED.values())
# Keys llama.cpp defines that Hearth's sampler chain has no stage for: shown by inspect as not applied.
NOT_APPLIED = ("sequence", "xtc_probability", "xtc_threshold", "mirostat", "mirostat_tau", "mirostat_eta")


def recommended_sampling(meta: Callable[[str], str | None]) -> dict[str, float | int]:
    """The settings the model recommends, by SamplingOptions field name ({} for most files)."""
    out: dict[str, float | int] = {}
    for key, (name, kind, low, high) in APPLIED.items():
        raw = meta(PREFIX + key)
        if raw is None:
            continue
        try:
            value = kind(float(raw)) if kind is int else float(raw)
        except (TypeError, ValueError):
            continue
        if low <= value <= high:
            out[name] = value
    return out


def unapplied_keys(meta: Callable[[str], str | None]) -> list[str]:
    """The recommendation keys a file has that Hearth does not apply (said by inspect, never silently dropped)."""
    return [PREFIX + key for key in NOT_APPLIED if meta(PREFIX + key) is not None]


def describe(recommended: dict[str, float | int]) -> str:
    """One line for inspect and the window: 'temperature 0.6, top_p 0.95'."""
    return ", ".join(f"{name} {value:g}" for name, value in recommended.items())
