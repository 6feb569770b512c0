"""The GPU check (scripts/gpu_check.py, issue #28) is run on a borrowed GPU machine with minutes to spare, so its
bench step is run here first, on the CPU runtime with small random models (--dry-run): every command it runs
there must work here, and each must leave its figures in the results file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.heavy, pytest.mark.slow, pytest.mark.timeout(960)]
ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_s_bench_step_runs_here_on_the_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    done = subprocess.run([sys.executable, "scripts/gpu_check.py", "bench", "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    log = (tmp_path / "gpu_check-bench-dry.log").read_text()
    assert done.returncode == 0, log[-3000:]
    assert "exit code" not in log and "timed out" not in log, log[-3000:]
    results = json.loads((tmp_path / "gpu_check-bench-dry.json").read_text())
    runs = [k for k in results if k.startswith("bench random-")]
    # The big model at all, none, 25, 50 and 75% of its 4 layers (#46's curve); big F16 and small, all layers.
    assert sorted(k for k in runs if k.startswith("bench random-big-q4_0")) == [
        f"bench random-big-q4_0 ngl {n}" for n in ("-1", "0", "1", "2", "3")]
    assert len(runs) == 7
    assert all(results[k]["tg128"] > 0 and results[k]["pp512"] > 0 for k in runs)
    serve = results["bench serve"]["rows"]
    assert serve and serve[0]["single"]["tok_s"] > 0 and serve[0]["parallel"]["tok_s"] > 0
    assert results["bench spec"]["rows"]
    # What the GPU run compares: each model's first words offloaded and on the CPU runtime (equal on the CPU, where
    # both are the CPU), the fit's figures beside them, doctor's report, and the seed's ladder.
    for name in ("random-small-q4_0", "random-big-q4_0", "random-big-f16"):
        assert results[f"fit {name}"]["gpu_layers"] >= 0
        offloaded, cpu = results[f"chat {name} auto"], results[f"chat {name} cpu"]
        assert offloaded["text"] and offloaded["text"] == cpu["text"]
        assert set(results[f"gpu memory {name} cpu"]) >= {"baseline_mb", "peak_mb", "held_mb", "series"}
    assert results["doctor"]["runtimes"]
    assert [row["id"] for row in results["bench matrix"]["rows"]] == ["f16", "q8_0", "q4_k_m", "q4_k_m_spec",
                                                                      "combined"]
