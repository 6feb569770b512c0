"""Speculative decoding on the real bundled model: lossless, adaptive, and refusing foreign vocabularies."""

from __future__ import annotations

import pytest

from app.core.errors import ModelLoadError
from tests.helpers.gguf_edit import swap_tokens
from app.engine.decoding.decode import Decoder, common_prefix
from app.engine.speculation.draft_model import DraftModelDrafter
from app.engine.speculation.lookup import LookupDrafter
from app.protocol.messages import DONE, STATS, LoadOptions, SamplingOptions
from app.engine.decoding.runtime import Runtime
from app.engine.speculation.speculative import Speculator
from app.engine.prompt.template import template_for
from tests.engine.spec_checks import CODE, N_TOKENS, assert_same_or_near_tie, generate, set_costs

SPEC_KEYS = {"drafter", "drafted", "accepted", "acceptance", "tokens_per_step", "k", "speedup", "plain_reason"}
PROMPTS = [
    "Repeat this function exactly, renamed to rolling_mean:\n\n" + CODE,
    "List the days of the week, then list them again in the same order.",
    "Tell me a short story about a lighthouse keeper.",
]


def options(model, **kw) -> LoadOptions:
    return LoadOptions(model_path=str(model), n_ctx=1024, n_threads=1, **kw)


@pytest.fixture(scope="module")
def target(bundled_model):
    # One thread: the test machines are shared, and spinning threads on a busy CPU cost far more.
    # In-process, without extra buffer types: quantized models crash with them on some CPUs (see DESIGN.md).
    rt = Runtime(options(bundled_model), extra_bufts=False)
    dec = Decoder(rt)
    template = template_for(rt)[1]
    yield rt, dec, template
    dec.close()
    rt.close()


@pytest.fixture(scope="module")
def plain_runs(target):
    """Greedy plain decoding of every prompt: (prompt text, KV tokens afterwards)."""
    rt, dec, template = target
    runs = []
    for text in PROMPTS:
        prompt = template.render([{"role": "user", "content": text}], add_generation_prompt=True)
        runs.append((prompt, generate(dec, prompt, None)[0]))
    return runs


def test_lookup_drafts_continue_the_latest_match():
    d = LookupDrafter()
    d.begin([1, 2, 3, 4, 5, 9, 9, 2, 3, 7, 8])
    d.advance([2, 3])  # "2 3" occurred twice; the latest continues with 7 8
    assert d.propose(3) == [7, 8, 2]
    d.advance([6, 6])
    assert d.propose(3) == []  # "3 6 6" / "6 6" never occurred before


def test_greedy_lookup_equals_plain(target, plain_runs):
    rt, dec, _ = target
    drafted = accepted = 0
    for prompt, plain in plain_runs:
        spec = Speculator(LookupDrafter(), draft_max=6, adaptive=False)
        tokens, done, _ = generate(dec, prompt, spec)
        assert set(done["spec"]) == SPEC_KEYS and done["spec"]["drafter"] == "lookup"
        drafted += done["spec"]["drafted"]
        accepted += done["spec"]["accepted"]
        assert_same_or_near_tie(rt, dec, plain, tokens)
    assert drafted > 0 and accepted > 0  # the drafts were really verified, some kept


def test_greedy_draft_model_equals_plain_and_self_draft_is_always_accepted(target, plain_runs, bundled_model):
    rt, dec, _ = target
    drafter = DraftModelDrafter(rt.options, str(bundled_model), extra_bufts=False, n_ctx=rt.n_ctx)
    try:
        for prompt, plain in plain_runs[:2]:
            spec = Speculator(drafter, draft_max=4, adaptive=False)
            evaluated_before = drafter.decoder.total_evaluated
            tokens, done, _ = generate(dec, prompt, spec)
            s = done["spec"]
            assert s["drafter"] == "draft-model" and s["drafted"] >= N_TOKENS // 2
            # The draft is the target itself: only batch-size rounding can make it miss, and rarely.
            assert s["accepted"] >= 0.9 * s["drafted"]
            assert s["tokens_per_step"] > 3.0
            assert_same_or_near_tie(rt, dec, plain, tokens)
            # The draft evaluated the prompt once, then only new tokens: no history re-evaluated per round.
            evaluated = drafter.decoder.total_evaluated - evaluated_before
            assert evaluated <= len(tokens) + 2 * s["drafted"]
            assert common_prefix(drafter.decoder.tokens, tokens) >= len(tokens) - 5
    finally:
        drafter.close()


def test_draft_model_in_another_quantization_equals_plain(target, plain_runs, model_variant):
    rt, dec, _ = target
    drafter = DraftModelDrafter(rt.options, str(model_variant("Q4_0")), extra_bufts=False, n_ctx=rt.n_ctx)
    try:
        prompt, plain = plain_runs[0]
        tokens, done, _ = generate(dec, prompt, Speculator(drafter, draft_max=3, adaptive=False))
        assert done["spec"]["accepted"] > 0
        assert_same_or_near_tie(rt, dec, plain, tokens)
    finally:
        drafter.close()


def test_sampling_with_temperature_uses_the_target_chain(target, plain_runs):
    rt, dec, _ = target
    prompt = plain_runs[0][0]
    sampling = SamplingOptions(temperature=0.8, seed=7, repeat_penalty=1.0, max_tokens=N_TOKENS, ignore_eos=True)
    spec = Speculator(LookupDrafter(), draft_max=4, adaptive=False)
    tokens, done, events = generate(dec, prompt, spec, sampling)
    assert done["completion_tokens"] == N_TOKENS
    assert done["spec"]["drafted"] > 0
    # Every position is sampled by the target; a repeat pass with the same seed and drafter repeats it.
    again, _, _ = generate(dec, prompt, Speculator(LookupDrafter(), draft_max=4, adaptive=False), sampling)
    assert again == tokens


def test_planner_picks_plain_when_batches_cost_as_much_as_their_tokens():
    spec = Speculator(LookupDrafter(), k_cap=8)
    set_costs(spec, lambda n: 0.010 * n)  # Q4_1's batched CPU kernel: no saving from batching
    assert spec.plain_reason and "verifying drafts" in spec.plain_reason
    spec.hits, spec.misses = 9.0, 1.0
    spec._plan()
    assert spec.k == 0
    set_costs(spec, lambda n: 0.010 + 0.001 * n)  # memory-bound: a batch costs about one step
    assert spec.plain_reason is None
    spec._plan()
    assert spec.k >= 6
    spec.hits, spec.misses = 0.2, 9.8  # drafts keep failing
    spec._plan()
    assert spec.k == 0


def test_a_draft_model_costing_a_third_of_the_target_is_ruled_out():
    class CostlyDrafter(LookupDrafter):  # only its cost and that it follows the KV matter to the rule
        name, follows_kv = "draft-model", True

    spec = Speculator(CostlyDrafter(), k_cap=8)
    spec.drafter.step_s = 0.004
    set_costs(spec, lambda n: 0.010 + 0.001 * n)
    assert "draft token costs 36%" in spec.plain_reason  # 4 ms against 11 ms
    spec.drafter.step_s = 0.001
    set_costs(spec, lambda n: 0.010 + 0.001 * n)
    assert spec.plain_reason is None


def test_losing_verifies_back_off_exponentially_and_a_win_resets():
    spec = Speculator(LookupDrafter(), k_cap=8)
    set_costs(spec, lambda n: 0.010 + 0.002 * n)
    waits = []
    for _ in range(10):
        spec._judge(4, 0)  # four drafts, none accepted: one token for the price of 1.8 steps
        waits.append(spec.wait)
    assert waits == [8, 16, 32, 64, 128, 256, 512, 1024, 1024, 1024]
    spec._judge(4, 4)  # five tokens for 1.8 steps
    assert spec.backoff == 0


def test_draft_model_that_cannot_pay_runs_the_plain_loop_without_touching_the_draft(target, plain_runs,
                                                                                    bundled_model):
    rt, dec, _ = target
    # The target drafting for itself: each draft token costs a whole target step.
    drafter = DraftModelDrafter(rt.options, str(bundled_model), extra_bufts=False, n_ctx=rt.n_ctx)
    try:
        spec = Speculator(drafter)
        spec.calibrate(dec)
        assert "draft token costs" in spec.plain_reason
        evaluated = drafter.decoder.total_evaluated
        for prompt, plain in plain_runs[1:]:
            tokens, done, events = generate(dec, prompt, spec)
            assert tokens == plain  # the very same loop as without a drafter, so bit for bit
            assert done["spec"]["drafted"] == 0 and done["spec"]["k"] == 0
            assert done["spec"]["tokens_per_step"] == pytest.approx(1.0)
            assert all(ev["spec"]["plain_reason"] for ev in events if ev["ev"] == STATS)
        assert drafter.decoder.total_evaluated == evaluated  # not even the prompt was evaluated by the draft
    finally:
        drafter.close()


def test_a_draft_model_backed_off_far_hands_the_answer_to_the_plain_loop(target, plain_runs, bundled_model):
    rt, dec, _ = target
    drafter = DraftModelDrafter(rt.options, str(bundled_model), extra_bufts=False, n_ctx=rt.n_ctx)
    try:
        class BackedOff(Speculator):
            def _reset_counts(self):  # the answer starts where a run of losing probes would have left it
                super()._reset_counts()
                self.hits, self.misses, self.backoff = 0.01, 10.0, 256

        spec = BackedOff(drafter)
        spec.calibrate(dec)
        drafter.step_s = 0.0  # pretend the draft is free, so only the back-off can stop it
        set_costs(spec, lambda n: 0.010 + 0.001 * n)
        evaluated = drafter.decoder.total_evaluated
        prompt, plain = plain_runs[2]
        tokens, done, _ = generate(dec, prompt, spec)
        assert tokens == plain and done["completion_tokens"] == N_TOKENS
        assert done["spec"]["drafted"] == 0 and done["spec"]["tokens_per_step"] == pytest.approx(1.0)
        assert drafter.decoder.total_evaluated == evaluated
    finally:
        drafter.close()


def test_adaptive_lookup_speculates_where_batches_are_cheap(target, plain_runs):
    rt, dec, _ = target
    spec = Speculator(LookupDrafter())
    spec.calibrate(dec)
    # As on a GPU, where verifying a dozen tokens costs little more than one step.
    set_costs(spec, lambda n: spec.costs.t[1] * (1 + 0.02 * (n - 1)))
    prompt, plain = plain_runs[0]  # the answer repeats a few lines of the function
    tokens, done, _ = generate(dec, prompt, spec)
    assert done["spec"]["accepted"] > 0 and done["spec"]["tokens_per_step"] > 1.0
    assert_same_or_near_tie(rt, dec, plain, tokens)


def test_adaptive_lookup_reports_live_stats(target, plain_runs):
    rt, dec, _ = target
    spec = Speculator(LookupDrafter())
    spec.calibrate(dec)
    prompt, plain = plain_runs[0]
    tokens, done, events = generate(dec, prompt, spec)
    assert set(done["spec"]) == SPEC_KEYS
    assert done["spec"]["speedup"] > 0 and done["spec"]["tokens_per_step"] >= 1.0
    assert_same_or_near_tie(rt, dec, plain, tokens)
    assert all(set(ev["spec"]) == SPEC_KEYS for ev in events if ev["ev"] == STATS)
    assert events[-1]["ev"] == DONE


def test_draft_model_with_another_vocabulary_is_refused(engine, bundled_model, tmp_path):
    foreign = swap_tokens(bundled_model, tmp_path / "foreign-vocab.gguf", 1000, 1001)
    with pytest.raises(ModelLoadError) as err:
        engine.load(options(bundled_model, draft_model=str(foreign)))
    message = str(err.value)
    assert "foreign-vocab.gguf" in message and bundled_model.name in message and "token 1000" in message
    # Nothing was left loaded half-way: the engine answers and a plain load works.
    info = engine.load(options(bundled_model, lookup=True))
    assert info["model"] == bundled_model.name


def test_chat_with_lookup_reports_spec(engine, bundled_model):
    engine.load(options(bundled_model, lookup=True))
    done = None
    for ev in engine.chat([{"role": "user", "content": PROMPTS[0]}],
                          SamplingOptions(temperature=0.0, max_tokens=40)):
        if ev["ev"] == DONE:
            done = ev
    assert done is not None and set(done["spec"]) == SPEC_KEYS and done["spec"]["drafter"] == "lookup"
