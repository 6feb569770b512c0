"""`hearth bench matrix` and `hearth bench compare` as a user runs them: real quantizer, real child
processes per configuration, the bundled model. Runs are --quick (short answers, one run each)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

ROW_IDS = ["f16", "q8_0", "q4_k_m", "q4_k_m_spec", "combined"]


def hearth(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, HEARTH_HOME=str(home), HEARTH_DISCOVERY_HOME=str(home / "discovery-home"))
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The whole matrix, quick, with the Q8_0 row broken on purpose (a quantized V cache needs flash
    attention, which rows 1-4 leave off): llama.cpp refuses it, and the row must say so instead of vanishing."""
    home = tmp_path_factory.mktemp("matrix-home")
    out = tmp_path_factory.mktemp("matrix-out")
    proc = hearth("bench", "matrix", "--quick", "--threads", "1", "--set", "q8_0.kv_type=q8_0", "--json",
                  "--csv", str(out / "m.csv"), "--plot", str(out / "m.png"), home=home)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"result": json.loads(proc.stdout), "out": out, "home": home}


def rows_by_id(result: dict) -> dict:
    return {r["id"]: r for r in result["rows"]}


@pytest.mark.slow
@pytest.mark.heavy
def test_every_configuration_is_reported_with_medians_and_spread(full):
    r = full["result"]
    assert [row["id"] for row in r["rows"]] == ROW_IDS
    rows = rows_by_id(r)
    for rid in ("f16", "q4_k_m", "q4_k_m_spec", "combined"):
        row = rows[rid]
        assert row["status"] == "ok", row.get("reason")
        assert row["file_size_bytes"] == os.path.getsize(row["model_file"])
        assert row["pp512"]["median"] > 0
        for name, w in row["workloads"].items():
            for key in ("prompt_tok_s", "gen_tok_s", "ttft_s"):
                s = w[key]
                assert s["min"] <= s["median"] <= s["max"] and s["median"] > 0, (rid, name, key)
                assert len(s["runs"]) == r["repeats"] == 1
            assert 0 < w["completion_tokens"] <= r["workloads"][name]["max_tokens"]
            # The share of the bandwidth bound is the row's own bytes per token at its own speed.
            expected = w["gen_tok_s"]["median"] * row["bytes_per_token"] / (r["bandwidth"]["read_gb_s"] * 1e9)
            assert w["bandwidth_share"] == pytest.approx(expected)
            assert ("spec" in w) == row["speculative"]
    # The code-editing prompt carries a whole function; the chat prompt is one sentence.
    assert rows["f16"]["workloads"]["code"]["prompt_tokens"] > 3 * rows["f16"]["workloads"]["chat"]["prompt_tokens"]
    assert rows["q4_k_m_spec"]["workloads"]["code"]["spec"]["drafter"] == "lookup"
    # Smaller files, and (each row in its own process) a smaller peak RSS.
    sizes = [rows[i]["file_size_bytes"] for i in ("f16", "q8_0", "q4_k_m")]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 2 * sizes[2]
    assert rows["f16"]["peak_rss_mb"] > rows["q4_k_m"]["peak_rss_mb"] + 0.5 * (sizes[0] - sizes[2]) / 2**20
    # Percentages against the F16 baseline.
    base = rows["f16"]["workloads"]["chat"]["gen_tok_s"]["median"]
    q4 = rows["q4_k_m"]["workloads"]["chat"]
    assert q4["gen_vs_baseline_pct"] == pytest.approx(100 * (q4["gen_tok_s"]["median"] / base - 1))
    assert rows["f16"]["vs_baseline"]["file_size_pct"] == 0


@pytest.mark.slow
@pytest.mark.heavy
def test_a_failed_configuration_is_shown_failed_with_the_reason(full):
    from app.bench.matrix_report import format_markdown, table_rows

    row = rows_by_id(full["result"])["q8_0"]
    assert row["status"] == "failed"
    assert "flash attention" in row["reason"]
    for name in full["result"]["workloads"]:
        line = table_rows(full["result"], name)[2]
        assert line[0] == "Q8_0 (INT8)" and line[1].startswith("FAILED:") and "flash attention" in line[1]
    assert "FAILED:" in format_markdown(full["result"])


@pytest.mark.slow
@pytest.mark.heavy
def test_results_are_saved_with_the_machine_and_exported(full):
    r, out, home = full["result"], full["out"], full["home"]
    saved = Path(r["saved_to"])
    assert saved.parent == home / "data" / "bench"
    assert json.loads(saved.read_text())["rows"] == r["rows"]
    m = r["machine"]
    assert m["physical_cores"] >= 1 and m["ram_total_mb"] > 0 and m["cpu"] and m["llama_cpp_python"]
    assert m["gpu"] and r["bandwidth"]["read_gb_s"] > 0.1
    # Quantized variants were made once, in the models folder, for the next run to reuse.
    made = {Path(row["model_file"]) for row in r["rows"] if row.get("model_file")}
    assert {p.parent for p in made} == {home / "data" / "models"} and len(made) == 3
    lines = list(csv.DictReader((out / "m.csv").open()))
    assert len(lines) == 2 * len(ROW_IDS)
    assert {(x["workload"], x["status"]) for x in lines if x["config"] == "Q8_0 (INT8)"} == \
        {("chat", "failed"), ("code", "failed")}
    f16 = next(x for x in lines if x["workload"] == "code" and x["config"] == "F16 baseline")
    assert float(f16["gen_tok_s"]) == pytest.approx(rows_by_id(r)["f16"]["workloads"]["code"]["gen_tok_s"]["median"],
                                                    rel=1e-3)
    png = (out / "m.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.slow
@pytest.mark.heavy
def test_combined_row_adds_kv_quantization_flash_attention_and_says_why_no_gpu(full):
    import llama_cpp

    row = rows_by_id(full["result"])["combined"]
    assert row["status"] == "ok", row.get("reason")
    assert (row["kv_type"], row["flash_attn"], row["speculative"]) == ("q8_0", "on", True)
    if not llama_cpp.llama_supports_gpu_offload():
        assert row["gpu_offload"] == "n/a (CPU-only build)" and row["gpu_layers"] == 0
        assert row["gpu_mb"] is None  # no GPU memory to report without layers on a GPU
    else:
        assert row["gpu_mb"] > 0
    assert all(w["spec"]["drafter"] == "lookup" for w in row["workloads"].values())
    assert row["vs_baseline"]["peak_rss_pct"] < 0  # q8_0 KV cache and INT4 weights against F16 and f16 KV


@pytest.mark.slow
@pytest.mark.heavy
def test_compare_prints_two_runs_side_by_side(full, tmp_path):
    a = Path(full["result"]["saved_to"])
    b = tmp_path / "b.json"  # what a `--rows q8_0,combined` run saves
    b.write_text(json.dumps(dict(full["result"], rows=[r for r in full["result"]["rows"]
                                                       if r["id"] in ("q8_0", "combined")])))
    proc = hearth("bench", "compare", str(a), str(b), home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert full["result"]["machine"]["cpu"] in text
    line = next(x for x in text.splitlines() if x.startswith("| Q8_0"))
    assert "failed -> failed" in line
    assert "-> missing" in next(x for x in text.splitlines() if x.startswith("| F16 baseline"))
    assert "(1.00x)" in next(x for x in text.splitlines() if x.startswith("| combined"))
    # The same run against itself: every figure 1.00x.
    same = hearth("bench", "compare", str(a), str(a), "--json", home=tmp_path)
    c = json.loads(same.stdout)
    ratios = [line["gen tok/s"]["ratio"] for line in c["workloads"]["chat"] if line["status_a"] == "ok"]
    assert len(ratios) == 4 and all(x == pytest.approx(1.0) for x in ratios)


def test_compare_and_matrix_refuse_bad_input_in_one_sentence(tmp_path):
    (tmp_path / "x.json").write_text('{"kind": "something else"}')
    proc = hearth("bench", "compare", str(tmp_path / "x.json"), str(tmp_path / "missing.json"), home=tmp_path)
    assert proc.returncode == 1 and "not a result of `hearth bench matrix`" in proc.stderr
    assert "Traceback" not in proc.stderr
    for args, words in [(("--rows", "nope"), "no configuration 'nope'"),
                        (("--set", "combined.colour=red"), "cannot be set"),
                        (("--set", "combined"), "ROW.KEY=VALUE"),
                        (("--model", str(tmp_path / "none.gguf")), "none.gguf"),
                        (("--quality-text", str(tmp_path / "none.txt")), "none.txt does not exist")]:
        proc = hearth("bench", "matrix", "--quick", *args, home=tmp_path)
        assert proc.returncode == 1 and words in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.heavy
def test_quality_columns_score_each_file_against_f16_once(full, tmp_path):
    """Mean KLD and same top token per row's file against the F16 variant (one chunk of 128 tokens in quick mode),
    also for the Q8_0 row whose speed run failed: its file was still made and scored."""
    from app.bench.matrix_report import format_markdown, table_rows

    r, out = full["result"], full["out"]
    q = r["quality"]
    assert (q["text"], q["ctx"], q["chunks"], q["positions"]) == ("built-in", 128, 1, 63)
    rows = rows_by_id(r)
    assert rows["f16"]["quality"]["base"] and rows["f16"]["quality"]["kld_mean"] == 0
    q8, q4 = rows["q8_0"]["quality"], rows["q4_k_m"]["quality"]
    assert 0 < q8["kld_mean"] < q4["kld_mean"] and 0.5 < q4["same_top"] <= q8["same_top"] <= 1
    assert rows["combined"]["quality"] == q4  # the same file, scored once
    header, *lines = table_rows(r, "chat")
    assert header[-2:] == ["mean KLD", "same top"]
    assert lines[2][-2].startswith(f"{q4['kld_mean']:.4f}") and lines[1][-1].startswith(f"{100 * q8['same_top']:.1f}%")
    assert "Quality columns: mean KL divergence" in format_markdown(r)
    line = next(x for x in csv.DictReader((out / "m.csv").open()) if x["config"] == "Q8_0 (INT8)")
    assert float(line["kld_mean"]) == pytest.approx(q8["kld_mean"], rel=1e-4)
    proc = hearth("bench", "compare", r["saved_to"], r["saved_to"], home=tmp_path)
    assert proc.returncode == 0 and "mean KLD" in proc.stdout
    assert f"{q8['kld_mean']:.4f} -> {q8['kld_mean']:.4f}" in next(x for x in proc.stdout.splitlines()
                                                                   if x.startswith("| Q8_0"))


def test_variants_are_quantized_once_and_reused(bundled_model):
    from app.bench.variants import prepare_variant
    from app.core import library

    first = prepare_variant(bundled_model, "Q8_0")
    assert not first["cached"]
    stamp = os.stat(first["path"]).st_mtime_ns
    again = prepare_variant(bundled_model, "Q8_0")
    assert again["cached"] and again["path"] == first["path"] and os.stat(first["path"]).st_mtime_ns == stamp
    assert prepare_variant(bundled_model, "Q4_1") == {"path": str(bundled_model), "cached": True,
                                                      "quantized_from": None}
    assert library.resolve(first["path"]).source == "quantized"


def _workers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if "app.bench.matrix" in " ".join(p.cmdline())]


@pytest.mark.slow
@pytest.mark.heavy
def test_cancel_stops_the_running_configuration_and_its_process():
    from app.bench.matrix import MatrixCancelled, run_matrix

    cancel = threading.Event()
    seen: list[str] = []

    def progress(_fraction: float, message: str) -> None:
        seen.append(message)
        if "warm-up" in message:  # the child is loaded and measuring
            cancel.set()

    with pytest.raises(MatrixCancelled):
        run_matrix(None, progress=progress, cancel=cancel, rows=["q8_0"], quick=True, repeats=1, threads=1)
    assert any("warm-up" in m for m in seen)
    assert not _workers()


@pytest.mark.slow
@pytest.mark.heavy
def test_a_crashed_configuration_is_failed_with_the_signal_and_the_log():
    from app.bench.matrix import run_matrix

    seen: list[str] = []

    def progress(_fraction: float, message: str) -> None:
        seen.append(message)
        if "warm-up" in message:
            for p in _workers():
                p.send_signal(signal.SIGKILL)

    result = run_matrix(None, progress=progress, rows=["q4_k_m"], quick=True, repeats=2, threads=1, save=False)
    [row] = result["rows"]
    assert row["status"] == "failed"
    assert "stopped by SIGKILL" in row["reason"] and ".log" in row["reason"]
    assert any("round 1/2" in m for m in seen) and not any("round 2/2" in m for m in seen)  # not retried
    assert "saved_to" not in result


def test_peak_rss_of_a_configuration_is_its_own_not_its_parents():
    import numpy as np

    big = np.ones(400 * 2**20 // 8)  # the parent peaks at 400+ MB (as a GUI with a chat open might)
    out = subprocess.run([sys.executable, "-c", "from app.core.metrics import peak_rss_mb; "
                          "print(peak_rss_mb())"], capture_output=True, text=True, timeout=60, check=True)
    del big
    assert 5 < float(out.stdout) < 200

