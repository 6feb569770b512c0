"""The matrix's figures from raw runs: medians with spread, the best drafter per workload, changes vs F16."""

from __future__ import annotations

import statistics

from app.bench.matrix_plan import BASELINE


def bytes_read_per_token(info) -> int:
    """Generation reads every weight once per token, except the input embedding, of which it reads one row;
    with tied embeddings (no output.weight) that same matrix is the output layer and is read whole."""
    names = {t.name: t for t in info.tensors}
    embd = names.get("token_embd.weight")
    if embd is None or "output.weight" not in names:
        return info.weights_bytes
    rows = embd.shape[-1] if embd.shape else 1
    return info.weights_bytes - embd.n_bytes + embd.n_bytes // max(rows, 1)


def stat(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def summarize_workload(runs: list[dict], bytes_per_token: int, bandwidth_gb_s: float) -> dict:
    gen = stat([r["gen_tok_s"] for r in runs])
    out = {
        "prompt_tokens": runs[0]["prompt_tokens"],
        "completion_tokens": statistics.median(r["completion_tokens"] for r in runs),
        "prompt_tok_s": stat([r["prompt_tok_s"] for r in runs]),
        "gen_tok_s": gen,
        "ttft_s": stat([r["ttft_s"] for r in runs]),
        "bandwidth_share": gen["median"] * bytes_per_token / (bandwidth_gb_s * 1e9) if bandwidth_gb_s else None,
    }
    specs = [r["spec"] for r in runs if r.get("spec")]
    if specs:
        drafted = sum(s["drafted"] for s in specs)
        out["spec"] = {
            "drafter": specs[0]["drafter"],
            "acceptance": sum(s["accepted"] for s in specs) / drafted if drafted else 0.0,
            "drafted": drafted,
            "tokens_per_step": statistics.median(s["tokens_per_step"] for s in specs),
            "k": [s["k"] for s in specs],
        }
    return out


def pct(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return 100.0 * (value - base) / base


def add_deltas(rows: list[dict], workloads: list[str]) -> None:
    base = next((r for r in rows if r["id"] == BASELINE and r["status"] == "ok"), None)
    for row in rows:
        if row["status"] != "ok" or base is None:
            continue
        row["vs_baseline"] = {
            "pp512_pct": pct(row["pp512"]["median"], base["pp512"]["median"]),
            "peak_rss_pct": pct(row["peak_rss_mb"], base["peak_rss_mb"]),
            "file_size_pct": pct(row["file_size_bytes"], base["file_size_bytes"]),
        }
        for w in workloads:
            mine, theirs = row["workloads"][w], base["workloads"][w]
            mine["gen_vs_baseline_pct"] = pct(mine["gen_tok_s"]["median"], theirs["gen_tok_s"]["median"])
            mine["prompt_vs_baseline_pct"] = pct(mine["prompt_tok_s"]["median"], theirs["prompt_tok_s"]["median"])
            mine["ttft_vs_baseline_pct"] = pct(mine["ttft_s"]["median"], theirs["ttft_s"]["median"])


def merge_runs(old: dict | None, new: dict) -> dict:
    """Add one child's runs to those of the same configuration in earlier rounds."""
    if old is None or not new["ok"]:
        return new
    old["pp512"] += new["pp512"]
    for w, runs in new["workloads"].items():
        old["workloads"][w] += runs
    old["peak_rss_mb"] = max(old["peak_rss_mb"], new["peak_rss_mb"])
    old["gpu_mb"] = max((v for v in (old.get("gpu_mb"), new.get("gpu_mb")) if v is not None), default=None)
    old["load_s"] = min(old["load_s"], new["load_s"])
    old["load_average"] += new["load_average"]
    return old


def fill_row(row: dict, runs: dict, workloads: list[str], bw: float) -> None:
    """Medians per workload; for speculative rows the fastest drafter per workload (the others stay listed)."""
    ok = {d: r for d, r in runs.items() if r["ok"]}
    row["attempts"] = {d or "plain": ({"status": "ok", "load_s": r["load_s"], "load_average": r["load_average"]}
                                      if r["ok"] else {"status": "failed", "reason": r["reason"]})
                       for d, r in runs.items()}
    if not ok:
        row.update(status="failed", reason="; ".join(r["reason"] for r in runs.values()))
        return
    per_drafter = {d: {w: summarize_workload(r["workloads"][w], row["bytes_per_token"], bw) for w in workloads}
                   for d, r in ok.items()}
    row["workloads"] = {}
    for w in workloads:
        best = max(per_drafter, key=lambda d: per_drafter[d][w]["gen_tok_s"]["median"])
        row["workloads"][w] = per_drafter[best][w]
        if len(runs) > 1:
            row["workloads"][w]["others"] = {d: per_drafter[d][w]["gen_tok_s"]["median"]
                                             for d in per_drafter if d != best}
    row["pp512"] = stat([x for r in ok.values() for x in r["pp512"]])
    row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ok.values())
    row["gpu_mb"] = max((r["gpu_mb"] for r in ok.values() if r.get("gpu_mb") is not None), default=None)
    row["load_s"] = min(r["load_s"] for r in ok.values())
    row["extra_bufts"] = next(iter(ok.values()))["extra_bufts"]
    failed = {d: r["reason"] for d, r in runs.items() if not r["ok"]}
    if failed:
        row["note"] = "; ".join(f"{d} failed: {reason}" for d, reason in failed.items())

