"""`hearth bench spec` as a user runs it: every mode on the bundled model, and the report says whether each
speculative answer is plain decoding's, the same in every run, and how near a tie any difference was."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

N = 24


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.heavy
def test_bench_spec_reports_speed_and_agreement_for_every_mode():
    proc = subprocess.run([sys.executable, "-m", "app", "bench", "spec", "--quants", "Q4_1", "--max-tokens", str(N),
                           "--repeats", "2", "--no-llama", "--threads", "1", "--json"], capture_output=True,
                          text=True, timeout=840, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert [r["prompt"] for r in report["rows"]] == ["code-rename", "chat-story", "chat-advice"]
    for row in report["rows"]:
        assert row["plain_runs_agree"]  # one thread, fixed: plain decoding repeats itself exactly
        for mode in ("lookup", "draft", "predicted", "mispredicted"):
            e = row["modes"][mode]
            assert e["tok_s"] > 0 and e["ratio"] > 0
            # Decisions come from the kept calibration and acceptance alone: every run the same answer.
            assert e["runs_agree"], (row["prompt"], mode)
            if e["same_as_plain"]:
                assert e["first_difference"] is None and e["plain_gap"] is None and e["rounding"] is None
            else:
                assert 0 <= e["first_difference"] < N and e["plain_gap"] >= 0
                # Speculation changes an answer only where the kernels' rounding can flip plain's choice.
                assert e["plain_gap"] <= 2 * e["rounding"], (row["prompt"], mode, e)
        # The plain answer as the prediction is the answer (up to where a near-tie flipped it); another
        # prompt's answer is not.
        predicted, wrong = row["modes"]["predicted"], row["modes"]["mispredicted"]
        assert predicted["prediction_accepted"] >= min(predicted["first_difference"] or N, N) - 2
        assert wrong["prediction_accepted"] < N // 2
    # The table went to stderr, with a line of answers per row.
    assert proc.stderr.count("answers: lookup") == 3
