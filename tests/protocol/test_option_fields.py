"""The option tables: every field of LoadOptions and SamplingOptions is offered or explained, and the command
line's flags reach every field they describe."""

from __future__ import annotations

import argparse

import pytest

from app.commands.options import add_load_args, add_sampling_args, load_options, sampling_options
from app.protocol.option_fields import NOT_SET_BY_USERS, undescribed, with_values
from app.protocol.messages import LoadOptions, SamplingOptions


@pytest.mark.parametrize("cls", [LoadOptions, SamplingOptions])
def test_every_field_is_described_or_explained(cls):
    assert undescribed(cls) == []


def test_nothing_is_explained_that_does_not_exist():
    names = {f for cls in (LoadOptions, SamplingOptions) for f in cls.__dataclass_fields__}
    assert set(NOT_SET_BY_USERS) <= names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_load_args(p)
    add_sampling_args(p)
    return p


def test_defaults_are_the_options_defaults():
    args = _parser().parse_args([])
    assert sampling_options(args) == SamplingOptions(given=[])  # nothing given: the model's recommendation may fill in
    assert load_options(args) == LoadOptions(model_path=load_options(args).model_path)


def test_every_flag_reaches_its_field():
    args = _parser().parse_args([
        "--model", "m.gguf", "--threads", "1", "--gpu-layers", "-1", "--ctx", "2048", "--batch", "256", "--no-mmap",
        "--mlock", "--kv-type", "q8_0", "--flash-attn", "on", "--lookup",
        "--draft-max", "5", "--context-policy", "stop", "--sink-tokens", "2", "--no-keep-system",
        "--window-fraction", "0.25", "--ignore-fit",
        "--max-tokens", "9", "--temp", "0.3", "--top-k", "7", "--top-p", "0.5", "--min-p", "0.1",
        "--repeat-penalty", "1.3", "--repeat-last-n", "32", "--seed", "42", "--stop", "###", "--stop", "END"])
    assert load_options(args) == LoadOptions(
        model_path="m.gguf", n_threads=1, n_gpu_layers=-1, n_ctx=2048, n_batch=256, use_mmap=False, use_mlock=True,
        kv_type="q8_0", flash_attn="on", lookup=True, draft_max=5, context_policy="stop",
        sink_tokens=2, keep_system=False, window_fraction=0.25, ignore_fit=True)
    assert sampling_options(args) == SamplingOptions(
        max_tokens=9, temperature=0.3, top_k=7, top_p=0.5, min_p=0.1, repeat_penalty=1.3, repeat_last_n=32,
        seed=42, stop=["###", "END"],
        given=["temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "max_tokens", "seed"])
    # The other way of drafting (the two together are refused: check_options).
    assert load_options(_parser().parse_args(["--draft-model", "d.gguf"])).draft_model == "d.gguf"


def test_with_values_keeps_what_it_is_not_given_and_refuses_unknown_fields():
    base = SamplingOptions(stop=["x"], repeat_last_n=16)
    assert with_values(base, {"temperature": 0.1}) == SamplingOptions(stop=["x"], repeat_last_n=16, temperature=0.1)
    with pytest.raises(TypeError):
        with_values(base, {"temprature": 0.1})


def test_the_engine_refuses_out_of_range_options_from_any_client(engine, bundled_model):
    """The host checks what reaches it too: a client that skips the command line gets the same sentence."""
    from app.core.errors import HearthError
    from app.protocol.messages import LoadOptions, SamplingOptions

    with pytest.raises(HearthError, match="--threads 999: this computer has"):
        engine.load(LoadOptions(model_path=str(bundled_model), n_threads=999))
    engine.load(LoadOptions(model_path=str(bundled_model), n_ctx=256))
    with pytest.raises(HearthError, match="--temp must be between 0 and 2, not -1"):
        for _ in engine.complete("Hi", SamplingOptions(temperature=-1.0)):
            pass
