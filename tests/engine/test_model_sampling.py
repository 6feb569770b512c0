"""A model's own recommended sampling (GGUF general.sampling.*) takes the settings the user did not give, on
every surface: the engine applies it, and each surface says which settings were given."""

from __future__ import annotations

import argparse
import json
import threading

import pytest

from app.backends.remote import _sampling_body
from app.cli import main
from app.commands.options import add_sampling_args, sampling_options
from app.core.gguf.sampling import recommended_sampling, unapplied_keys
from tests.helpers.gguf_edit import copy_with_fields
from app.protocol.messages import LoadOptions, SamplingOptions
from app.engine.process.session import Session
from app.server.anthropic import messages as anthropic_api
from app.server.openai import chat_request as requests

QUESTION = [{"role": "user", "content": "Write a short story about a dragon."}]


@pytest.fixture(scope="module")
def recommending(tmp_path_factory, bundled_model):
    """The bundled model, with a file that recommends greedy decoding (and one setting Hearth has no stage for)."""
    return copy_with_fields(bundled_model, tmp_path_factory.mktemp("sampling") / "recommends-greedy.gguf", {},
                            add={"general.sampling.temp": 0.0, "general.sampling.min_p": 0.1,
                                 "general.sampling.mirostat": 2})


def test_the_keys_are_read_as_llama_cpp_defines_them_and_a_bad_value_is_left_out():
    meta = {"general.sampling.temp": "0.6", "general.sampling.top_k": "20", "general.sampling.top_p": "7",
            "general.sampling.min_p": "x", "general.sampling.xtc_probability": "0.5"}.get
    assert recommended_sampling(meta) == {"temperature": 0.6, "top_k": 20}
    assert unapplied_keys(meta) == ["general.sampling.xtc_probability"]
    assert recommended_sampling({}.get) == {}


def test_what_the_user_leaves_out_takes_the_models_recommendation(recommending):
    session = Session.load(LoadOptions(model_path=str(recommending), n_ctx=512))
    try:
        assert session.describe()["recommended_sampling"] == pytest.approx({"temperature": 0.0, "min_p": 0.1})

        def answer(**sampling):
            done = session.chat(QUESTION, SamplingOptions(max_tokens=24, **sampling), lambda _e: None,
                                threading.Event())
            return done["text"]

        greedy = answer(temperature=0.0, given=["temperature"])
        # Nothing given: the file's temperature 0 decides, whatever the seed.
        assert answer(seed=1, given=[]) == greedy
        assert answer(seed=2, given=[]) == greedy
        # A temperature the user gives is theirs: these answers are sampled.
        sampled = {answer(temperature=1.5, seed=seed, given=["temperature"]) for seed in (1, 2, 3)}
        assert sampled != {greedy}
        # A caller that fixes every setting (a benchmark: given None) is never changed by the file.
        assert session.with_recommended(SamplingOptions(temperature=0.9)).temperature == 0.9
    finally:
        session.close()


def test_inspect_names_the_recommendation_and_what_is_not_applied(recommending, capsys):
    assert main(["models", "inspect", str(recommending)]) == 0
    text = capsys.readouterr().out
    assert "the model recommends temperature 0, min_p 0.1" in text
    assert "not applied: general.sampling.mirostat" in text
    assert main(["models", "inspect", str(recommending), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["recommended_sampling"] == pytest.approx({"temperature": 0.0, "min_p": 0.1})


def test_each_surface_says_which_settings_the_user_gave():
    parser = argparse.ArgumentParser()
    add_sampling_args(parser)
    cli = sampling_options(parser.parse_args(["--temp", "0.3", "--max-tokens", "9"]))
    assert {"temperature", "max_tokens"} <= set(cli.given) and "top_p" not in cli.given
    assert sampling_options(parser.parse_args([])).temperature == SamplingOptions().temperature

    openai = requests.chat_request({"model": "m", "messages": QUESTION, "top_p": 0.5}, SamplingOptions()).sampling
    assert openai.given == ["top_p"]
    anthropic = anthropic_api.messages_request({"model": "m", "max_tokens": 8, "messages": QUESTION,
                                                "temperature": 0.2}).sampling
    assert anthropic.given == ["temperature"]

    # To a remote server only what was given goes: the rest is that server's (its model's recommendation).
    body = _sampling_body(cli)
    assert body["temperature"] == 0.3 and "top_p" not in body and "repeat_penalty" not in body
    assert _sampling_body(SamplingOptions())["top_p"] == SamplingOptions().top_p  # all fixed: all sent
