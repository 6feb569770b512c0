"""`hearth bench serve` as a user runs it: Hearth's own server beside another one (here a second `hearth serve`),
taking turns for several rounds, every answer of exactly the asked length, the table's figures the medians."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from app.bench.serve import format_table
from tests.server.conftest import start_server, stop_server

TOKENS = 8


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.heavy
def test_bench_serve_takes_turns_and_reports_medians(tmp_path):
    other, url = start_server("--parallel", "2", env={"HEARTH_HOME": str(tmp_path / "other")}, ctx=512)
    try:
        proc = subprocess.run([sys.executable, "-m", "app", "bench", "serve", "--parallel", "2", "--requests", "1",
                               "--max-tokens", str(TOKENS), "--rounds", "3", "--ctx", "512", "--threads", "1",
                               "--against", url, "--json"], capture_output=True, text=True, timeout=540,
                              stdin=subprocess.DEVNULL)
    finally:
        stop_server(other)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert [row["server"] for row in report["rows"]] == ["Hearth --parallel 2", url]
    for row in report["rows"]:
        assert len(row["rounds"]) == 3
        for r in row["rounds"]:
            # ignore_eos: the same work on every server, every answer exactly max_tokens long.
            assert (r["single"]["tokens"], r["parallel"]["tokens"]) == (TOKENS, 2 * TOKENS)
            assert r["single"]["short_answers"] == r["parallel"]["short_answers"] == 0
        for phase in ("single", "parallel"):
            assert row[phase]["tok_s"] == pytest.approx(statistics.median(r[phase]["tok_s"] for r in row["rounds"]))
            assert row[phase]["counted_by"] == "server"
    table = format_table(report)
    assert table.startswith("Medians of 3 rounds")
    assert f"Hearth / {url} at 2 streams:" in table and "(each round: " in table
    # Hearth against the other server: the median of the rounds' ratios, each round's two phases minutes apart.
    (compared,) = report["comparisons"]
    hearth, other = report["rows"]
    per_round = [h["parallel"]["tok_s"] / o["parallel"]["tok_s"] for h, o in zip(hearth["rounds"], other["rounds"])]
    assert compared["per_round"] == pytest.approx(per_round)
    assert compared["median_of_rounds"] == pytest.approx(statistics.median(per_round))
    assert f"{compared['median_of_rounds']:.2f}x, the median of the rounds" in table


def test_bench_serve_refuses_zero_rounds():
    proc = subprocess.run([sys.executable, "-m", "app", "bench", "serve", "--rounds", "0"], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stderr == "hearth: --rounds takes 1 or more rounds, not 0.\n"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_serve_times_the_responses_path_beside_chat_completions():
    """#45: the Responses API on the same server, by the same client, in the same run; both paths' answers of the
    asked length, counted by the server."""
    proc = subprocess.run([sys.executable, "-m", "app", "bench", "serve", "--parallel", "2", "--requests", "1",
                           "--max-tokens", str(TOKENS), "--rounds", "2", "--ctx", "512", "--threads", "1",
                           "--responses", "--json"], capture_output=True, text=True, timeout=540,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert [row["server"] for row in report["rows"]] == ["Hearth --parallel 2 /v1/chat/completions",
                                                         "Hearth --parallel 2 /v1/responses"]
    for row in report["rows"]:
        for r in row["rounds"]:
            assert (r["single"]["tokens"], r["parallel"]["tokens"]) == (TOKENS, 2 * TOKENS)
            assert r["parallel"]["ttft_p50_ms"] is not None
    versus = report["responses_vs_chat"]
    chat, responses = report["rows"]
    ratios = [r["single"]["tok_s"] / c["single"]["tok_s"] for c, r in zip(chat["rounds"], responses["rounds"])]
    assert versus["single_tok_s_ratio"] == pytest.approx(statistics.median(ratios))
    assert report["comparisons"] == []  # Hearth's second path is not "another server"
    assert "/v1/responses against /v1/chat/completions on the same server" in format_table(report)
