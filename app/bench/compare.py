"""`hearth bench compare A.json B.json`: two saved matrix results side by side, with B/A ratios.

Rows are matched by configuration (F16, Q8_0, ...), figures are the saved medians; a
configuration that failed or is missing in one run shows as such.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.bench.results import load_result
from app.protocol.option_spec import option

FIGURES = [  # (label, how to read the median from a row for a workload)
    ("gen tok/s", lambda row, w: row["workloads"][w]["gen_tok_s"]["median"]),
    ("prompt tok/s", lambda row, w: row["workloads"][w]["prompt_tok_s"]["median"]),
    ("TTFT ms", lambda row, w: row["workloads"][w]["ttft_s"]["median"] * 1000),
    ("peak RSS MB", lambda row, w: row["peak_rss_mb"]),
    # Quality against F16 (the same for every workload); a row whose quality was not measured shows '-'.
    ("mean KLD", lambda row, w: row["quality"]["kld_mean"]),
    ("same top %", lambda row, w: 100 * row["quality"]["same_top"]),
]
DIGITS = {"mean KLD": 4}
QUALITY = {"mean KLD", "same top %"}


def _value(row: dict | None, workload: str, read, label: str = "") -> float | None:
    if row is None or (row.get("status") != "ok" and label not in QUALITY):
        return None  # a failed row has no speed, but its file may still have been scored
    try:
        return float(read(row, workload))
    except (KeyError, TypeError):
        return None


def compare(a: dict, b: dict) -> dict:
    """Per workload and configuration: A, B and B/A for each figure (None where a side has no number)."""
    rows_a = {r["id"]: r for r in a["rows"]}
    rows_b = {r["id"]: r for r in b["rows"]}
    ids = list(rows_a) + [i for i in rows_b if i not in rows_a]
    out = {"a": _side(a), "b": _side(b), "workloads": {}}
    for w in [n for n in a.get("workloads", {}) if n in b.get("workloads", {})]:
        lines = []
        for rid in ids:
            ra, rb = rows_a.get(rid), rows_b.get(rid)
            line = {"id": rid, "label": (ra or rb)["label"], "status_a": _status(ra), "status_b": _status(rb)}
            for label, read in FIGURES:
                va, vb = _value(ra, w, read, label), _value(rb, w, read, label)
                line[label] = {"a": va, "b": vb, "ratio": vb / va if va and vb is not None else None}
            lines.append(line)
        out["workloads"][w] = lines
    return out


def _status(row: dict | None) -> str:
    if row is None:
        return "missing"
    return "ok" if row.get("status") == "ok" else f"failed: {row.get('reason', 'unknown')}"


def _side(r: dict) -> dict:
    from app.bench.results import machine_label

    return {"model": r.get("model"), "started": r.get("started"), "machine": machine_label(r.get("machine", {})),
            "threads": r.get("threads"), "repeats": r.get("repeats"), "quick": r.get("quick"),
            "read_gb_s": (r.get("bandwidth") or {}).get("read_gb_s"), "saved_to": r.get("saved_to")}


def format_comparison(c: dict, names: tuple[str, str] = ("A", "B")) -> str:
    lines = []
    for key, name in zip(("a", "b"), names):
        s = c[key]
        bw = f", read bandwidth {s['read_gb_s']:.1f} GB/s" if s.get("read_gb_s") else ""
        lines.append(f"{key.upper()}: {name}: {s['model']}, {s['started']}, {s['threads']} threads, "
                     f"{s['repeats']} repeats{' (quick)' if s.get('quick') else ''}")
        lines.append(f"   {s['machine']}{bw}")
    for w, rows in c["workloads"].items():
        lines += ["", f"Workload: {w}", ""]
        header = ["config"] + [label for label, _ in FIGURES]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for line in rows:
            cells = [line["label"]]
            cells += [_cell(line[label], line, DIGITS.get(label, 1)) for label, _ in FIGURES]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Each cell: A -> B (B/A)."]
    return "\n".join(lines)


def _cell(f: dict, line: dict, digits: int = 1) -> str:
    def side(v, status):
        if v is not None:
            return f"{v:.{digits}f}"
        return "missing" if status == "missing" else "failed" if status.startswith("failed") else "-"

    text = f"{side(f['a'], line['status_a'])} -> {side(f['b'], line['status_b'])}"
    if f["ratio"] is not None:
        text += f" ({f['ratio']:.2f}x)"
    return text


@dataclass
class CompareOptions:
    a: str = option(flag="a", metavar="A.json")  # two saved result files
    b: str = option(flag="b", metavar="B.json")
    json: bool = option(False, "--json")


def run(options: CompareOptions) -> int:
    c = compare(load_result(options.a), load_result(options.b))
    names = (Path(options.a).name, Path(options.b).name)
    print(json.dumps(c, indent=2) if options.json else format_comparison(c, names))
    return 0
