"""The context window (StreamingLLM sinks + sliding window) on the real bundled model.

In-process tests drive a Session directly so they can compare the engine's token history
with what llama.cpp reports about its KV cache; the multi-turn and cancel tests go through
the engine process, as the GUI does.
"""

from __future__ import annotations

import threading
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from app.core.errors import GenerationError
from app.engine.decoding.decode import Decoder, fill_batch
from app.protocol.messages import DONE, STATS, LoadOptions
from app.engine.decoding.runtime import Runtime
from app.engine.process.session import Session
from app.engine.context.window import NO_SHIFT_NOTICE
from tests.engine.kv_checks import (CTX, STORY, SYSTEM, assert_cache_consistent, assert_cache_means_its_tokens,
                                    greedy, kv_span)


def options(model, **kw) -> LoadOptions:
    return LoadOptions(model_path=str(model), n_ctx=CTX, n_threads=1, extra_bufts=False, **kw)


@pytest.fixture
def sessions(bundled_model):
    made: list[Session] = []

    def make(model=None, **kw) -> Session:
        made.append(Session(Runtime(options(model or bundled_model, **kw), extra_bufts=False), None))
        return made[-1]

    yield make
    for s in made:
        s.close()


def write_mrope_model(path: Path, tokenizer_from: Path) -> Path:
    """A tiny random-weight qwen2vl model: M-RoPE (several positions per token), which
    llama.cpp cannot shift. It borrows the bundled model's tokenizer and chat template."""
    reader = gguf.GGUFReader(str(tokenizer_from))
    w = gguf.GGUFWriter(str(path), "qwen2vl")
    n_embd, n_ff, n_layer = 64, 128, 2
    w.add_block_count(n_layer)
    w.add_context_length(2048)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_sections([4, 2, 2, 0])
    for field in reader.fields.values():
        if field.name.startswith("tokenizer."):
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    rng = np.random.default_rng(0)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("output.weight", rand(n_vocab, n_embd))
    for i in range(n_layer):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(n_embd, np.float32))
        for t in ("q", "k", "v"):
            w.add_tensor(b + f"attn_{t}.weight", rand(n_embd, n_embd))
            w.add_tensor(b + f"attn_{t}.bias", np.zeros(n_embd, np.float32))
        w.add_tensor(b + "attn_output.weight", rand(n_embd, n_embd))
        w.add_tensor(b + "ffn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(b + "ffn_gate.weight", rand(n_ff, n_embd))
        w.add_tensor(b + "ffn_up.weight", rand(n_ff, n_embd))
        w.add_tensor(b + "ffn_down.weight", rand(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def no_shift_model(tmp_path_factory, bundled_model) -> Path:
    return write_mrope_model(tmp_path_factory.mktemp("noshift") / "tiny-qwen2vl.gguf", bundled_model)


def text_of(rt, tokens) -> str:
    return b"".join(rt.piece(t) for t in tokens).decode("utf-8", "replace")


def watch_make_room(session: Session) -> list[dict]:
    """Record the cache before and after each make_room the decode loop asks for."""
    policy, rt, dec = session.decoder.context_policy, session.rt, session.decoder
    real = policy.make_room
    seen: list[dict] = []

    def make_room(decoder, n):
        before = (len(dec.tokens), kv_span(rt), policy.protected(rt, dec.tokens))
        ok = real(decoder, n)
        seen.append({"n": n, "len_before": before[0], "kv_before": before[1], "head": before[2],
                     "len_after": len(dec.tokens), "kv_after": kv_span(rt), "ok": ok})
        return ok

    policy.make_room = make_room
    return seen


def test_window_shifts_when_full_by_half_the_movable_part(sessions):
    s = sessions()
    seen = watch_make_room(s)
    done = s.chat(STORY, greedy(340), lambda ev: None, None)
    assert done["finish_reason"] == "length" and done["completion_tokens"] == 340
    window = done["window"]
    assert window["policy"] == "window" and window["shifts"] == len(seen) >= 2
    for call in seen:
        assert call["ok"]
        assert call["len_before"] == CTX and call["kv_before"] == (0, CTX - 1)  # only when full
        drop = (CTX - call["head"]) // 2
        assert call["len_after"] == CTX - drop
        assert call["kv_after"] == (0, CTX - drop - 1)  # llama.cpp's positions moved down with the history
    assert window["dropped"] == sum(c["len_before"] - c["len_after"] for c in seen)
    assert window["n_cached"] == len(s.decoder.tokens) <= CTX
    # What the cache holds after the head is the newest part of the answer, in order.
    head = seen[-1]["head"]
    kv_text = text_of(s.rt, s.decoder.tokens[head:])
    last_piece = 16  # the last sampled token ends the answer without being evaluated
    assert done["text"].find(kv_text, len(done["text"]) - len(kv_text) - last_piece) >= 0
    assert_cache_consistent(s.decoder)


def perplexity_through_the_window(rt: Runtime, tokens: list[int], policy=None, step: int = 16) -> float:
    """Perplexity of tokens scored position by position, each chunk made room for by the engine's own
    context policy (Decoder.room_for -> the window's remove + shift), as generation would."""
    dec = Decoder(rt)
    dec.context_policy = policy
    batch = llama_cpp.llama_batch_init(step, 0, 1)
    nll, scored = 0.0, 0
    try:
        for start in range(0, len(tokens) - 1, step):
            part = tokens[start : start + step]
            assert dec.room_for(len(part))
            fill_batch(batch, part, len(dec.tokens), logits_all=True)
            assert llama_cpp.llama_decode(rt.ctx, batch) == 0
            dec.tokens.extend(part)
            targets = np.array(tokens[start + 1 : start + 1 + len(part)])
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(rt.ctx), shape=(len(part), rt.n_vocab))
            logits = logits[: len(targets)].astype(np.float64)
            top = logits.max(axis=1)
            lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
            nll += float((lse - logits[np.arange(len(targets)), targets]).sum())
            scored += len(targets)
        assert kv_span(rt) == (0, len(dec.tokens) - 1)
    finally:
        llama_cpp.llama_batch_free(batch)
        dec.close()
    return float(np.exp(nll / scored))


@pytest.mark.heavy
def test_window_perplexity_stays_near_the_full_cache_and_the_sinks_matter(bundled_model):
    """StreamingLLM's result, through the engine's own shifts: with attention sinks a window that has
    dropped most of the text scores it nearly as well as the full cache; without sinks clearly worse.

    Measured (600 tokens of Python's pydoc topics, 256-token window, 22 shifts; 1 and 2 threads, extra
    buffer types on and off alike): full 16.35, 4 sinks 17.15 (1.05x), no sinks 26.64 (1.63x). The bounds
    leave room for other kernels' rounding, far more than it moves a perplexity, and still fail a window
    that keeps the wrong tokens (the no-sink run is one).
    """
    from app.bench.window_texts import long_text
    from app.engine.context.policy import make_policy

    full_rt = Runtime(LoadOptions(model_path=str(bundled_model), n_ctx=1024, n_threads=1), extra_bufts=False)
    try:
        tokens = full_rt.tokenize(long_text(), add_special=True)[:600]
        full = perplexity_through_the_window(full_rt, tokens)
    finally:
        full_rt.close()
    windowed = {}
    for sinks in (4, 0):
        rt = Runtime(options(bundled_model), extra_bufts=False)
        try:
            policy = make_policy("window", rt, sinks, keep_system=False, fraction=0.0)
            windowed[sinks] = perplexity_through_the_window(rt, tokens, policy)
            assert policy.shifts >= 10 and policy.dropped > 300
        finally:
            rt.close()
    print(f"perplexity: full {full:.2f}, window 4 sinks {windowed[4]:.2f}, no sinks {windowed[0]:.2f}")
    assert windowed[4] <= 1.2 * full
    assert windowed[0] >= 1.25 * windowed[4]


def test_system_prompt_survives_shifting_unless_told_otherwise(sessions):
    kept = sessions()
    kept.chat(STORY, greedy(340), lambda ev: None, None)
    system = kept.decoder.context_policy.system_tokens(kept.rt)
    assert len(system) > 20 and kept.decoder.context_policy.shifts >= 2
    assert kept.decoder.tokens[: len(system)] == system
    assert "Biscuit" in text_of(kept.rt, kept.decoder.tokens)

    slid = sessions(keep_system=False)
    slid.chat(STORY, greedy(340), lambda ev: None, None)
    assert slid.decoder.context_policy.shifts >= 2
    assert slid.decoder.tokens[:4] == system[:4]  # the sinks stay
    assert "Biscuit" not in text_of(slid.rt, slid.decoder.tokens)


def test_prompt_longer_than_the_context_keeps_sinks_system_and_the_end(sessions):
    s = sessions()
    words = " ".join(f"item{i}" for i in range(400))
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"{words} Which item came last?"}]
    done = s.chat(messages, greedy(20), lambda ev: None, None)
    assert done["finish_reason"] == "length"
    assert done["prompt_tokens"] < CTX
    seen = text_of(s.rt, s.decoder.tokens)
    assert "Biscuit" in seen and "Which item came last?" in seen and "item399" in seen
    assert "item0 " not in seen
    assert done["window"]["dropped"] > 300 and done["window"]["shifts"] == 0
    assert_cache_means_its_tokens(s.decoder)


def test_stop_policy_ends_the_answer_and_refuses_a_long_prompt(sessions):
    s = sessions(context_policy="stop")
    done = s.chat(STORY, greedy(340), lambda ev: None, None)
    assert done["finish_reason"] == "context_full"
    assert len(s.decoder.tokens) == CTX and done["window"]["shifts"] == 0
    with pytest.raises(GenerationError, match="does not fit"):
        s.chat([{"role": "user", "content": "word " * 400}], greedy(5), lambda ev: None, None)


def test_fallback_to_truncate_middle_when_the_cache_cannot_shift(sessions, no_shift_model):
    s = sessions(no_shift_model)
    assert not s.describe()["can_shift"]
    assert s.describe()["window"] == {"policy": "truncate-middle", "n_cached": 0, "dropped": 0, "shifts": 0,
                                      "sinks": 4, "notice": NO_SHIFT_NOTICE}
    seen = watch_make_room(s)
    stats = []
    done = s.chat(STORY, greedy(340), lambda ev: stats.append(ev) if ev["ev"] == STATS else None, None)
    assert done["finish_reason"] == "length" and done["completion_tokens"] == 340
    window = done["window"]
    assert window["policy"] == "truncate-middle" and window["shifts"] == 0
    assert window["rebuilds"] == len(seen) >= 2 and window["notice"] == NO_SHIFT_NOTICE
    for call in seen:
        drop = (CTX - call["head"]) // 2
        assert call["len_after"] == CTX - drop and call["kv_after"] == (0, CTX - drop - 1)
    assert window["reevaluated"] == sum(CTX - (CTX - c["head"]) // 2 - c["head"] for c in seen)
    assert all(ev["window"]["notice"] == NO_SHIFT_NOTICE for ev in stats)
    assert_cache_means_its_tokens(s.decoder)


def test_cancel_during_a_truncate_middle_rebuild_leaves_a_consistent_cache(sessions, no_shift_model):
    s = sessions(no_shift_model)
    cancelled = threading.Event()
    policy = s.decoder.context_policy
    real_rebuild = policy._rebuild
    in_rebuild = []

    def rebuild(decoder, head, drop):
        in_rebuild.append(len(decoder.tokens) - head - drop)  # tokens it is about to re-read
        cancelled.set()  # the user's stop arrives as the pause begins
        return real_rebuild(decoder, head, drop)

    policy._rebuild = rebuild
    done = s.chat(STORY, greedy(1000), lambda ev: None, cancelled)
    assert in_rebuild and done["finish_reason"] == "cancelled"
    assert done["window"]["reevaluated"] < in_rebuild[0]  # it stopped re-reading early
    assert kv_span(s.rt) == (0, len(s.decoder.tokens) - 1)
    # The next turn carries on from there.
    follow = STORY + [{"role": "assistant", "content": done["text"]}, {"role": "user", "content": "Go on."}]
    again = s.chat(follow, greedy(30), lambda ev: None, threading.Event())
    assert again["finish_reason"] == "length" and kv_span(s.rt) == (0, len(s.decoder.tokens) - 1)


def chat_events(engine, messages, n, cancel_after_shift=False):
    done, stats = None, []
    for ev in engine.chat(messages, greedy(n)):
        if ev["ev"] == STATS:
            stats.append(ev)
            if cancel_after_shift and ev["window"]["shifts"] >= 1:
                engine.cancel()
                cancel_after_shift = False
        elif ev["ev"] == DONE:
            done = ev
    return done, stats


def test_multi_turn_chat_past_the_window_through_the_engine(engine, bundled_model):
    info = engine.load(options(bundled_model))
    assert info["window"]["policy"] == "window" and info["can_shift"]
    messages = [{"role": "system", "content": SYSTEM}]
    shifts, transcript_chars = 0, 0
    for turn, question in enumerate(["Tell me about the sea.", "And the parrot?", "What next?", "The end?"]):
        messages.append({"role": "user", "content": question})
        done, stats = chat_events(engine, messages, 160)
        assert done["finish_reason"] == "length" and done["completion_tokens"] == 160
        window = done["window"]
        assert window["n_cached"] <= CTX and window["shifts"] >= shifts
        assert all(ev["window"]["n_cached"] <= CTX for ev in stats)
        if turn >= 1:
            # The whole transcript is longer than the context, yet only the new turn is read.
            assert done["prompt_evaluated"] <= 20 < done["prompt_tokens"]
        shifts = window["shifts"]
        messages.append({"role": "assistant", "content": done["text"]})
        transcript_chars += len(done["text"])
    assert shifts >= 3 and window["dropped"] > CTX
    assert transcript_chars > 4 * CTX  # the transcript (kept by the client) is far longer than the view


def test_cancel_right_after_a_shift_then_continue(engine, bundled_model):
    engine.load(options(bundled_model))
    done, _ = chat_events(engine, STORY, 5000, cancel_after_shift=True)
    assert done["finish_reason"] == "cancelled"
    assert done["window"]["shifts"] >= 1 and done["completion_tokens"] < 5000
    follow = STORY + [{"role": "assistant", "content": done["text"]}, {"role": "user", "content": "Go on."}]
    again, _ = chat_events(engine, follow, 20)
    assert again["finish_reason"] == "length"
    assert again["prompt_evaluated"] <= 20  # the shifted cache was reused after the cancel


def test_no_shift_model_through_the_engine_tells_the_user_and_keeps_going(engine, no_shift_model):
    info = engine.load(options(no_shift_model))
    assert not info["can_shift"] and info["window"]["policy"] == "truncate-middle"
    assert info["window"]["notice"] == NO_SHIFT_NOTICE
    messages = list(STORY)
    for _ in range(2):
        done, stats = chat_events(engine, messages, 300)
        assert done["finish_reason"] == "length" and done["window"]["rebuilds"] >= 1
        assert all(ev["window"]["notice"] == NO_SHIFT_NOTICE for ev in stats)
        messages += [{"role": "assistant", "content": done["text"]}, {"role": "user", "content": "More."}]


def test_find_reuse_picks_the_latest_full_run_and_survives_a_retokenized_start():
    from app.engine.context.window import find_reuse

    head = [1, 2, 3, 4]
    cached = head + [7, 8, 9] * 20  # repetitive, as greedy answers are
    prompt = head + [7, 8, 9] * 30 + [50, 51]  # the transcript: more of it, then the new turn
    skip, at, length = find_reuse(cached, 4, prompt)
    assert (skip, length) == (0, 60) and prompt[at + length :] == [50, 51]
    # The transcript tokenized afresh split the first words after the dropped chunk differently.
    cached = head + [99, 98] + list(range(100, 200))
    prompt = head + list(range(10, 60)) + [97] + list(range(100, 200)) + [50]
    skip, at, length = find_reuse(cached, 4, prompt)
    assert cached[4 + skip : 4 + skip + length] == prompt[at : at + length] and length >= 90
    assert find_reuse(head + [300, 301], 4, prompt) is None


@pytest.mark.heavy
def test_bench_window_json_has_the_issue_keys(capsys):
    import json

    from app.cli import build_parser

    args = build_parser().parse_args(["bench", "window", "--threads", "1", "--tokens", "240", "--ctx", "256",
                                      "--compare-tokens", "0", "--ppl-tokens", "200", "--ppl-window", "64",
                                      "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("tokens_generated", "ctx", "rss_mb_after_first_ctx", "rss_mb_end", "tok_s_1000_2000",
                "tok_s_last_1000", "shifts", "ppl_full", "ppl_window_sinks", "ppl_window_nosinks"):
        assert key in out
    assert out["tokens_generated"] == 240 and out["ctx"] == 256 and out["shifts"] >= 1 and out["kv_consistent"]
    assert out["ppl_full"] > 1.0 and out["ppl_window_sinks"] > 1.0


def test_window_fraction_sets_the_chunk_dropped_per_shift(sessions):
    s = sessions(window_fraction=0.25)
    seen = watch_make_room(s)
    s.chat(STORY, greedy(230), lambda ev: None, None)
    assert seen and all(c["len_before"] - c["len_after"] == (CTX - c["head"]) // 4 for c in seen)
    assert kv_span(s.rt) == (0, len(s.decoder.tokens) - 1)
