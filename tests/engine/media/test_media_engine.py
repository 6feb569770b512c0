"""Media through the engine process, as every client sends them: bad media and bad projectors are one sentence
and the engine goes on; a model without a projector says so, by name; parallel slots read media too."""

from __future__ import annotations

import shutil
import sys
import threading
import time

import pytest

from app.backends.client import EngineClient
from app.core.errors import InvalidRequest
from app.bench.sample_media import png_bytes
from app.engine.decoding.runtime import Runtime
from app.engine.media.projector import checked_in_child
from app.engine.process.session import Session
from app.protocol.media import media_part
from app.protocol.messages import DONE, LoadOptions, SamplingOptions
from tests.engine.media.test_media_greedy import ask, question
from tests.protocol.test_media import bomb_png

GREEDY = SamplingOptions(temperature=0.0, max_tokens=8)


def answer(client: EngineClient, messages: list[dict]) -> dict:
    return next(e for e in client.chat(messages, GREEDY) if e.get("ev") == DONE)


@pytest.fixture
def client():
    made = EngineClient()
    yield made
    made.close()


def test_bad_media_are_one_sentence_and_the_engine_goes_on(tiny_media, client):
    made = tiny_media["gemma3"]
    info = client.load(LoadOptions(model_path=str(made.model), n_ctx=1024, n_threads=2))
    assert info["media"]["vision"] and not info["media"]["audio"] and info["media"]["paired"]
    good = answer(client, [question("gemma3", 1)])
    assert good["media_encoded"] == 1 and good["completion_tokens"] > 0
    cut = png_bytes(128, 128, 1)
    cases = {
        "bomb.png": (bomb_png(), "'bomb.png' is 20000x20000 pixels (400 MP); images may have at most 40 MP"),
        "cut.png": (cut[: len(cut) // 2], "'cut.png' is a damaged PNG file: it is cut short"),
        "notes.png": (b"just some text\n" * 40, "'notes.png' is not an image"),
    }
    for name, (data, sentence) in cases.items():
        started = time.perf_counter()
        with pytest.raises(InvalidRequest) as info:
            answer(client, [{"role": "user", "content": [media_part("image", data, name),
                                                         {"type": "text", "text": "What is it?"}]}])
        assert str(info.value).startswith(sentence)
        assert time.perf_counter() - started < 1.0, name
    assert answer(client, [question("gemma3", 1)])["text"] == good["text"]  # nothing else was lost


def test_a_model_without_a_projector_says_so_by_name(bundled_model, client):
    client.load(LoadOptions(model_path=str(bundled_model), n_ctx=512, n_threads=2))
    with pytest.raises(InvalidRequest) as info:
        answer(client, [question("gemma3", 1)])
    assert str(info.value).startswith(f"{bundled_model.name} cannot see images or hear sounds: it is loaded "
                                      "without a projector")


def test_a_projector_that_cannot_be_used_is_a_sentence_and_the_text_model_answers(tiny_media, bundled_model,
                                                                                   client, tmp_path):
    gemma = tiny_media["gemma3"]
    damaged = tmp_path / "mmproj-damaged.gguf"
    damaged.write_bytes(gemma.mmproj.read_bytes()[:200_000])
    cases = [
        (bundled_model, gemma.mmproj, "mmproj-gemma3.gguf is the projector of another model: it makes embeddings "
                                      f"64 wide and {bundled_model.name} reads 576"),
        (gemma.model, damaged, "The projector cannot be used: mmproj-damaged.gguf is truncated or damaged"),
        (gemma.model, gemma.model, "gemma3.gguf is not a projector (its architecture is 'gemma3'"),
    ]
    for model, mmproj, sentence in cases:
        info = client.load(LoadOptions(model_path=str(model), n_ctx=512, n_threads=2, mmproj=str(mmproj)))
        assert info["media"]["mmproj"] is None
        assert info["media"]["mmproj_error"].startswith(sentence), info["media"]["mmproj_error"]
        text = answer(client, [{"role": "user", "content": "Hello"}])
        assert text["completion_tokens"] > 0
        with pytest.raises(InvalidRequest) as refused:
            answer(client, [question("gemma3", 1)])
        assert f"without a projector ({sentence}" in str(refused.value)


def test_a_projector_that_aborts_libmtmd_costs_only_the_check_child(tiny_media):
    made = tiny_media["gemma3"]
    aborting = [sys.executable, "-c", "import os; os.abort()"]  # what libmtmd does to a Voxtral projector here
    checked = checked_in_child(made.model, made.mmproj, command=aborting)
    assert not checked["ok"]
    assert checked["detail"].startswith("libmtmd crashed opening the projector mmproj-gemma3.gguf (")
    assert "SIGABRT" in checked["detail"] and "the model answers text only" in checked["detail"]
    assert checked_in_child(made.model, made.mmproj)["ok"]  # the real check: opened, warmed up, remembered


def test_parallel_slots_read_media_as_one_slot_does_and_follow_ups_find_their_image(tiny_media):
    made = tiny_media["gemma3"]
    one = Session(Runtime(LoadOptions(model_path=str(made.model), n_ctx=1024, n_threads=2), extra_bufts=False), None)
    two = Session(Runtime(LoadOptions(model_path=str(made.model), n_ctx=1024, n_threads=2, n_parallel=2),
                          extra_bufts=False), None)
    try:
        alone = {seed: ask(one, [question("gemma3", seed)])[1]["text"] for seed in (1, 3)}
        events = {1: [], 3: []}
        for seed in (1, 3):
            two.chat([question("gemma3", seed)], SamplingOptions(temperature=0.0, max_tokens=16),
                     events[seed].append, threading.Event())
        while two.slots.running:
            two.slots.step()
        together = {seed: next(e for e in events[seed] if e["ev"] == DONE) for seed in (1, 3)}
        assert {seed: done["text"] for seed, done in together.items()} == alone
        assert {done["slot"] for done in together.values()} == {0, 1}
        # A follow-up about one image goes to the slot whose cache holds it: nothing is encoded again.
        for seed in (3, 1):
            follow = [question("gemma3", seed), {"role": "assistant", "content": together[seed]["text"]},
                      {"role": "user", "content": "Why?"}]
            events = []
            two.chat(follow, SamplingOptions(temperature=0.0, max_tokens=4), events.append, threading.Event())
            while two.slots.running:
                two.slots.step()
            done = next(e for e in events if e["ev"] == DONE)
            assert done["slot"] == together[seed]["slot"] and done["media_encoded"] == 0
    finally:
        one.close()
        two.close()
