"""Predicted outputs on the real bundled model: the prediction drafts, the answer stays plain decoding's, the same
request gives the same answer every run, and the calibration behind the decisions is measured once and kept."""

from __future__ import annotations

import json

import pytest

from app.core import paths
from app.engine.speculation import spec_calibration
from app.engine.decoding.decode import Decoder
from app.engine.speculation.prediction import PredictionDrafter
from app.protocol.messages import LoadOptions
from app.engine.decoding.runtime import Runtime
from app.engine.speculation.speculative import Speculator
from app.engine.prompt.template import template_for
from tests.engine.spec_checks import CODE, assert_same_or_near_tie, generate, predicted

N = 96


def aligned(pred: list[int], answer: list[int], k: int = 4) -> list[list[int]]:
    """The drafts a PredictionDrafter offers after each token of `answer`."""
    d = PredictionDrafter(pred)
    drafts = []
    for tok in answer:
        d.advance([tok])
        drafts.append(d.propose(k))
    return drafts


def test_a_prediction_that_the_answer_follows_drafts_its_next_tokens():
    assert aligned([1, 2, 3, 4, 5, 6], [1, 2, 3]) == [[2, 3, 4, 5], [3, 4, 5, 6], [4, 5, 6]]
    d = PredictionDrafter([1, 2, 3])
    assert d.propose(2) == [1, 2]  # before the first token: the prediction's start


def test_drafting_resumes_after_an_inserted_a_deleted_and_a_changed_token():
    pred = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    # Inserted 90 91 after 12: two answer tokens back on the prediction find it again.
    assert aligned(pred, [10, 11, 12, 90, 91, 13, 14])[-1] == [15, 16, 17, 18]
    # Deleted 13 14: "12 15" is no n-gram of the prediction, but 15 lies just after the last match.
    assert aligned(pred, [10, 11, 12, 15])[-1] == [16, 17, 18, 19]
    # Changed 13 into 77: lost at 77, found again at 14.
    drafts = aligned(pred, [10, 11, 12, 77, 14])
    assert drafts[-2] == [] and drafts[-1] == [15, 16, 17, 18]


def test_a_prediction_prefers_the_place_after_its_last_match():
    pred = [1, 2, 3, 9, 1, 2, 3, 8]
    d = PredictionDrafter(pred)
    d.advance([1, 2, 3, 9, 5])  # off the prediction after its first "1 2 3 9"
    d.advance([1, 2, 3])  # "1 2 3" occurs twice; the later one continues the answer's place in the prediction
    assert d.propose(1) == [8]


def test_an_unrelated_prediction_offers_nothing():
    drafts = aligned([500, 501, 502, 503], [7, 8, 9, 10, 11])
    assert drafts[1:] == [[]] * 4


@pytest.fixture(scope="module")
def target(bundled_model):
    rt = Runtime(LoadOptions(model_path=str(bundled_model), n_ctx=1024, n_threads=1), extra_bufts=False)
    dec = Decoder(rt)
    template = template_for(rt)[1]
    prompt = template.render([{"role": "user", "content": "Repeat this function exactly, renamed to rolling_mean:"
                                                           "\n\n" + CODE}], add_generation_prompt=True)
    plain_tokens, plain, _ = generate(dec, prompt, None, max_tokens=N)
    yield rt, dec, prompt, plain_tokens, plain
    dec.close()
    rt.close()


def test_the_previous_answer_as_prediction_is_drafted_and_the_answer_stays(target):
    rt, dec, prompt, plain_tokens, plain = target
    tokens, done, _ = generate(dec, prompt, predicted(dec, plain["text"]), max_tokens=N)
    s = done["spec"]
    assert s["drafter"] == "prediction" and s["plain_reason"] is None
    assert s["accepted"] >= 0.8 * (N - 1) and s["tokens_per_step"] > 2.0
    assert_same_or_near_tie(rt, dec, plain_tokens, tokens)


def test_an_edited_prediction_still_drafts_most_of_the_answer(target):
    """The prediction misses a line and has one the answer does not: drafting resumes after each."""
    rt, dec, prompt, plain_tokens, plain = target
    lines = plain["text"].splitlines(keepends=True)
    assert len(lines) >= 4
    edited = "".join(lines[:1] + lines[2:3] + ["    # a line the answer does not have\n"] + lines[3:])
    tokens, done, _ = generate(dec, prompt, predicted(dec, edited), max_tokens=N)
    s = done["spec"]
    assert s["accepted"] >= 0.5 * (N - 1) and s["drafted"] > s["accepted"]
    assert_same_or_near_tie(rt, dec, plain_tokens, tokens)


def test_the_same_request_gives_the_same_answer_and_schedule_every_run(target):
    """The verify schedule depends on the request alone (kept costs, acceptance), never on timings."""
    rt, dec, prompt, plain_tokens, plain = target
    lines = plain["text"].splitlines(keepends=True)
    prediction = "".join(lines[:2] + lines[3:])
    runs = [generate(dec, prompt, predicted(dec, prediction), max_tokens=N) for _ in range(3)]
    assert all(tokens == runs[0][0] for tokens, _, _ in runs)
    figures = [{k: done["spec"][k] for k in ("drafted", "accepted", "tokens_per_step", "k")} for _, done, _ in runs]
    assert figures[0]["drafted"] > 0 and figures == [figures[0]] * 3


def test_the_calibration_is_measured_once_kept_and_renewed_on_request(target):
    rt, dec, *_ = target
    spec_calibration._MEASURED.clear()  # measured by an earlier test of this process into another data folder
    spec = Speculator(PredictionDrafter([1, 2, 3]), k_cap=32)
    spec.calibrate(dec)
    facts = json.loads(paths.machine_facts_file().read_text())
    key = spec_calibration._key(spec_calibration.target_fields(rt))
    entry = facts[spec_calibration.ENTRY][key]
    assert entry["model"] == rt.path.name and entry["threads"] == 1 and entry["extra_bufts"] is False
    costs = spec_calibration.costs_of(entry)
    assert sorted(costs) == list(spec_calibration.CALIBRATION_SIZES)
    assert all(costs[a] <= costs[b] for a, b in zip(sorted(costs), sorted(costs)[1:]))  # never cheaper for more
    # What the file keeps is what the next speculator decides from, not a new measurement.
    entry["costs"] = {str(n): 0.01 * n for n in costs}
    facts[spec_calibration.ENTRY][key] = entry
    paths.machine_facts_file().write_text(json.dumps(facts))
    spec_calibration._MEASURED.clear()
    kept = Speculator(PredictionDrafter([1, 2, 3]), k_cap=32)
    kept.calibrate(dec)
    assert kept.costs.t[1:34] == [pytest.approx(0.01 * n) if n in costs else None for n in range(1, 34)]
    renewed = Speculator(PredictionDrafter([1, 2, 3]), k_cap=32)
    renewed.calibrate(dec, renew=True)
    assert renewed.costs.t[33] != pytest.approx(0.33)
    assert any(rt.path.name in line and "plain step" in line
               for line in map(spec_calibration.describe, spec_calibration.kept()))
