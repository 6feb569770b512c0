"""The matrix as people read it: the table per workload (CLI, README, GUI), Markdown, and CSV."""

from __future__ import annotations

import csv
from pathlib import Path

from app.bench.results import machine_label
from app.core.errors import HearthError


def _fmt_pct(p: float | None) -> str:
    return "" if p is None else f" ({p:+.0f}%)"


def _fmt_stat(s: dict | None, digits: int = 1, scale: float = 1.0) -> str:
    if not s:
        return "-"
    return f"{s['median'] * scale:.{digits}f} [{s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f}]"


def quality_cells(row: dict) -> list[str]:
    """Mean KLD and same-top share against F16 ('-' where not measured, 'failed' where scoring failed)."""
    q = row.get("quality")
    if not q:
        return ["-", "-"]
    if "error" in q:
        return ["failed", "failed"]
    if q.get("base"):
        return ["0 (base)", "100% (base)"]
    return [f"{q['kld_mean']:.4f} ±{q['kld_se']:.4f}", f"{100 * q['same_top']:.1f}% ±{100 * q['same_top_se']:.1f}"]


def quality_line(result: dict) -> str | None:
    q = result.get("quality")
    if not q:
        return None
    if "error" in q:
        return f"Quality columns: not measured ({q['error']})."
    text = "a built-in text" if q["text"] == "built-in" else Path(q["text"]).name
    return (f"Quality columns: mean KL divergence and same top token against the F16 file on {text}, "
            f"{q['positions']} positions ({q['chunks']} chunk{'s' if q['chunks'] != 1 else ''} of {q['ctx']} tokens, "
            "llama-perplexity's definitions), ± one standard error.")


def table_rows(result: dict, workload: str) -> list[list[str]]:
    """Header plus one line per row: what the CLI prints, the README shows and the GUI can put in a table."""
    out = [["config", "prompt tok/s", "gen tok/s", "TTFT ms", "peak RSS MB", "file MB", "acceptance",
            "BW bound", "mean KLD", "same top"]]
    for row in result["rows"]:
        name = row["label"]
        if row.get("gpu_offload"):
            name += f" [GPU: {row['gpu_offload']}]"
        if row["status"] != "ok":
            out.append([name, f"FAILED: {row.get('reason', 'unknown')}"] + [""] * 6 + quality_cells(row))
            continue
        w = row["workloads"][workload]
        base = row.get("vs_baseline", {})
        spec = w.get("spec")
        accept = "-"
        if spec:  # the adaptive engine may decide that no draft pays: say so rather than "0%"
            accept = (f"{100 * spec['acceptance']:.0f}%" if spec["drafted"] else "none drafted") + \
                f" ({spec['drafter']})"
        out.append([
            name,
            _fmt_stat(w["prompt_tok_s"], 0) + _fmt_pct(w.get("prompt_vs_baseline_pct")),
            _fmt_stat(w["gen_tok_s"]) + _fmt_pct(w.get("gen_vs_baseline_pct")),
            _fmt_stat(w["ttft_s"], 0, 1000.0) + _fmt_pct(w.get("ttft_vs_baseline_pct")),
            f"{row['peak_rss_mb']:.0f}" + _fmt_pct(base.get("peak_rss_pct")),
            f"{row['file_size_bytes'] / 1e6:.0f}" + _fmt_pct(base.get("file_size_pct")),
            accept,
            f"{100 * w['bandwidth_share']:.0f}%" if w.get("bandwidth_share") is not None else "-",
            *quality_cells(row),
        ])
    return out


def busy_warning(result: dict) -> str | None:
    """Other programs running meanwhile slow every row, and llama.cpp's threads more than their share."""
    cores = result["machine"].get("physical_cores") or 1
    loads = [x[0] for x in (result.get("load_average_start"), result.get("load_average_end")) if x]
    if not loads or max(loads) < cores:
        return None
    return (f"Warning: the machine was busy (load average up to {max(loads):.1f} on {cores} cores): all figures "
            "are lower and noisier than on an idle machine; compare rows of this run with each other.")


def format_markdown(result: dict) -> str:
    bw = result["bandwidth"]
    lines = [f"Model: {result['model']}; {result['threads']} threads; median [min-max] of {result['repeats']} "
             f"runs{' (quick)' if result.get('quick') else ''}; % = change vs the F16 baseline.",
             f"Machine: {machine_label(result['machine'])}; measured read bandwidth {bw['read_gb_s']:.1f} GB/s; "
             f"load average {result.get('load_average_start')} at start, {result.get('load_average_end')} at end; "
             f"whole run {result['wall_s'] / 60:.1f} min.", ""]
    busy = busy_warning(result)
    if busy:
        lines.insert(2, busy)
    quality = quality_line(result)
    if quality:
        lines.insert(-1, quality)
    for name, w in result["workloads"].items():
        rows = table_rows(result, name)
        lines.append(f"Workload: {w['label']} (up to {w['max_tokens']} tokens)")
        lines.append("")
        lines.append("| " + " | ".join(rows[0]) + " |")
        lines.append("|" + "---|" * len(rows[0]))
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        lines.append("")
    for row in result["rows"]:
        if row.get("status") == "ok" and row.get("pp512"):
            lines.append(f"pp512 {row['label']}: {_fmt_stat(row['pp512'], 0)} tok/s"
                         + _fmt_pct(row.get("vs_baseline", {}).get("pp512_pct")))
        if row.get("note"):
            lines.append(f"note {row['label']}: {row['note']}")
    return "\n".join(lines)


def write_csv(result: dict, path: str | Path) -> None:
    header = ["workload", "config", "status", "reason", "qtype", "kv_type", "flash_attn", "gpu_layers",
              "prompt_tok_s", "prompt_tok_s_min", "prompt_tok_s_max", "gen_tok_s", "gen_tok_s_min", "gen_tok_s_max",
              "gen_vs_baseline_pct", "ttft_ms", "ttft_ms_min", "ttft_ms_max", "peak_rss_mb", "file_size_mb",
              "drafter", "acceptance", "bandwidth_share", "pp512_tok_s", "kld_mean", "kld_se", "same_top",
              "same_top_se"]
    try:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh)
            out.writerow(header)
            for name in result["workloads"]:
                for row in result["rows"]:
                    base = [name, row["label"], row["status"], row.get("reason", ""), row["qtype"], row["kv_type"],
                            row["flash_attn"], row["gpu_layers"]]
                    q = row.get("quality") or {}
                    figures = ["" if q.get(k) is None else f"{q[k]:.6f}"
                               for k in ("kld_mean", "kld_se", "same_top", "same_top_se")]
                    if row["status"] != "ok":
                        out.writerow(base + [""] * (len(header) - len(base) - 4) + figures)
                        continue
                    w = row["workloads"][name]
                    spec = w.get("spec") or {}
                    p, g, t = w["prompt_tok_s"], w["gen_tok_s"], w["ttft_s"]
                    out.writerow(base + [
                        f"{p['median']:.2f}", f"{p['min']:.2f}", f"{p['max']:.2f}",
                        f"{g['median']:.2f}", f"{g['min']:.2f}", f"{g['max']:.2f}",
                        "" if w.get("gen_vs_baseline_pct") is None else f"{w['gen_vs_baseline_pct']:.1f}",
                        f"{t['median'] * 1000:.1f}", f"{t['min'] * 1000:.1f}", f"{t['max'] * 1000:.1f}",
                        f"{row['peak_rss_mb']:.1f}", f"{row['file_size_bytes'] / 1e6:.1f}",
                        spec.get("drafter", ""), "" if not spec else f"{spec['acceptance']:.3f}",
                        "" if w.get("bandwidth_share") is None else f"{w['bandwidth_share']:.3f}",
                        f"{row['pp512']['median']:.1f}",
                        *figures,
                    ])
    except OSError as exc:
        raise HearthError(f"Could not write the CSV file {path}: {exc.strerror or exc}.") from None
