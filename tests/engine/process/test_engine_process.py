"""The engine process through its client, on the real bundled model."""

from __future__ import annotations

import os
import signal
import time

import pytest

from app.core.errors import EngineCrashed, ModelLoadError
from app.protocol.messages import DONE, TOKEN, LoadOptions, SamplingOptions

GREEDY = dict(temperature=0.0, repeat_penalty=1.0)


def load(engine, model, **kw):
    return engine.load(LoadOptions(model_path=str(model), n_ctx=kw.pop("n_ctx", 1024), **kw))


def run_chat(engine, messages, **sampling):
    tokens, done = [], None
    for ev in engine.chat(messages, SamplingOptions(**sampling)):
        if ev["ev"] == TOKEN:
            tokens.append(ev["text"])
        elif ev["ev"] == DONE:
            done = ev
    assert done is not None
    assert "".join(tokens) == done["text"]  # streamed pieces add up to the answer, nothing twice
    return done


USER = [{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}]


def test_load_reports_model_time_and_memory(engine, bundled_model):
    info = load(engine, bundled_model)
    assert info["model"] == bundled_model.name
    assert info["n_ctx"] == 1024
    assert info["load_s"] > 0 and info["rss_mb"] > 50
    assert info["n_layer"] == 30


def test_greedy_is_deterministic(engine, bundled_model):
    load(engine, bundled_model)
    first = run_chat(engine, USER, max_tokens=40, **GREEDY)
    engine.reset()
    second = run_chat(engine, USER, max_tokens=40, **GREEDY)
    assert first["text"] == second["text"]
    assert first["completion_tokens"] == 40 and first["finish_reason"] == "length"


def test_seeded_sampling_repeats_and_differs_from_other_seed(engine, bundled_model):
    load(engine, bundled_model)
    runs = []
    for seed in (7, 7, 8):
        engine.reset()
        runs.append(run_chat(engine, USER, max_tokens=30, temperature=1.0, seed=seed)["text"])
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_stop_string_ends_the_answer_before_it(engine, bundled_model):
    load(engine, bundled_model)
    full = run_chat(engine, USER, max_tokens=60, **GREEDY)["text"]
    words = full.split()
    stop = " " + words[len(words) // 2]  # a word from the middle of the answer
    cut = full.index(stop)
    engine.reset()
    done = run_chat(engine, USER, max_tokens=60, stop=[stop], **GREEDY)
    assert done["finish_reason"] == "stop"
    assert done["text"] == full[:cut]
    assert stop not in done["text"]


def test_multi_turn_evaluates_only_new_tokens(engine, bundled_model):
    load(engine, bundled_model)
    history = list(USER)
    first = run_chat(engine, history, max_tokens=30, **GREEDY)
    assert first["prompt_evaluated"] == first["prompt_tokens"]
    history += [{"role": "assistant", "content": first["text"]},
                {"role": "user", "content": "Now give it a happy ending."}]
    second = run_chat(engine, history, max_tokens=20, **GREEDY)
    # Everything up to the end of the first answer stays in the KV cache. An answer cut
    # at max_tokens ends on a token that was sampled but never decoded, so it is new.
    not_decoded = 1 if first["finish_reason"] == "length" else 0
    cached = first["prompt_tokens"] + first["completion_tokens"] - not_decoded
    assert second["prompt_evaluated"] == second["prompt_tokens"] - cached
    assert second["prompt_evaluated"] < 25


def test_cancel_stops_within_a_token(engine, bundled_model):
    load(engine, bundled_model)
    stream = engine.chat(USER, SamplingOptions(max_tokens=2000, ignore_eos=True, **GREEDY))
    received = received_after_cancel = 0
    cancelled_at = None
    done = None
    for ev in stream:
        if ev["ev"] == TOKEN:
            received += 1
            if cancelled_at is not None:
                received_after_cancel += 1
            elif received == 5:
                engine.cancel()
                cancelled_at = time.monotonic()
        elif ev["ev"] == DONE:
            done = ev
    assert done["finish_reason"] == "cancelled"
    assert done["completion_tokens"] < 50
    # Tokens already in the pipe may arrive, but the engine stops at its next token.
    assert received_after_cancel <= 3
    assert time.monotonic() - cancelled_at < 1.0


def test_kill_mid_generation_reports_crash_then_restarts_with_the_model(engine, bundled_model):
    load(engine, bundled_model)
    stream = engine.chat(USER, SamplingOptions(max_tokens=2000, ignore_eos=True, **GREEDY))
    pid = engine.pid
    got = 0
    with pytest.raises(EngineCrashed) as info:
        for ev in stream:
            if ev["ev"] == TOKEN:
                got += 1
                if got == 3:
                    killed_at = time.monotonic()
                    os.kill(pid, signal.SIGKILL)
    assert time.monotonic() - killed_at < 1.0
    message = str(info.value)
    assert "SIGKILL" in message and "log" in message
    assert engine.log_path.exists()
    # The supervisor starts a fresh engine and loads the model again by itself.
    info2 = engine.wait_loaded(timeout=120)
    assert engine.pid != pid
    assert info2["model"] == bundled_model.name
    assert run_chat(engine, USER, max_tokens=5, **GREEDY)["completion_tokens"] == 5


@pytest.mark.parametrize("kind", ["missing", "empty", "not_gguf", "truncated", "unknown_arch", "folder"])
def test_bad_model_files_give_one_sentence_and_engine_survives(engine, bundled_model, tmp_path, kind):
    from tests.helpers.tiny_gguf import write_truncated_copy, write_unknown_arch

    path = tmp_path / f"{kind}.gguf"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "not_gguf":
        path.write_text("this is a text file, not a model\n" * 10)
    elif kind == "truncated":
        write_truncated_copy(bundled_model, path)
    elif kind == "unknown_arch":
        write_unknown_arch(path)
    elif kind == "folder":
        path.mkdir()
    expected = {"missing": "not found", "empty": "empty", "not_gguf": "not a GGUF", "truncated": "truncated",
                "unknown_arch": "architecture 'hearthtestarch'", "folder": "folder"}[kind]
    with pytest.raises(ModelLoadError) as info:
        load(engine, path)
    message = str(info.value)
    assert path.name in message and expected in message
    assert "\n" not in message and "Traceback" not in message
    # The same engine process still loads and runs a good model.
    assert engine.alive
    load(engine, bundled_model)
    assert run_chat(engine, USER, max_tokens=3, **GREEDY)["completion_tokens"] == 3


def test_merged_token_events_carry_the_same_answer(engine, bundled_model):
    """The window asks for tokens merged over an interval: far fewer events, the same text, the first at once."""
    load(engine, bundled_model)
    sampling = SamplingOptions(max_tokens=80, ignore_eos=True, **GREEDY)
    per_token = [ev for ev in engine.chat(USER, sampling) if ev["ev"] == TOKEN]
    engine.reset()
    events = list(engine.chat(USER, sampling, stream_interval_ms=100))
    merged = [ev["text"] for ev in events if ev["ev"] == TOKEN]
    done = events[-1]
    assert done["ev"] == DONE and done["completion_tokens"] == 80
    assert "".join(merged) == "".join(ev["text"] for ev in per_token) == done["text"]
    assert len(per_token) >= 60  # one event per token (a few pieces are held back by UTF-8/stop checks)
    # At most one event per 100 ms of generation (plus the first and the tail): ~9 instead of 80 here.
    assert 2 <= len(merged) <= done["gen_s"] / 0.1 + 2
    assert merged[0] == per_token[0]["text"]  # the first token is not held back


def test_a_model_too_big_is_refused_before_the_loaded_one_is_let_go(engine, bundled_model, tmp_path):
    from app.core.errors import ModelTooBig
    from tests.helpers.tiny_gguf import write_oversized

    load(engine, bundled_model)
    pid = engine.pid
    big = write_oversized(tmp_path / "huge-64g.gguf")
    with pytest.raises(ModelTooBig) as info:
        load(engine, big)
    message = str(info.value)
    assert message.startswith("Does not fit: huge-64g.gguf") and "--ignore-fit" in message
    assert "\n" not in message
    # Nothing was lost: the same engine still has the bundled model loaded and answers at once.
    assert engine.pid == pid and engine.loaded["model"] == bundled_model.name
    assert run_chat(engine, USER, max_tokens=5, **GREEDY)["completion_tokens"] == 5
