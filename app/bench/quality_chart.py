"""The size-vs-KLD chart's points (issue #33), Qt-free: one point per measured quant, file size against mean KL
divergence, the types made without and with an importance matrix as two series.

Both painters read this: the PNG of `hearth bench quality --plot` (app/ui/bench/quality_plot.py) and the Benchmark
page's chart (app/ui/bench/quality_chart_view.py), from a fresh result or from the kept store entry.
"""

from __future__ import annotations

import math

PLAIN, MATRIX = "without a matrix", "with the matrix"


def series(rows: list[dict]) -> dict:
    """rows: measure()'s rows (type, imatrix, ok, size_bytes, kld_mean). Returns {'series': {PLAIN: [(MB, kld,
    label)], MATRIX: [...]} (each sorted by size), 'zero': [labels]}. A row with a KLD of 0 is the base itself (a
    quantized base measured as its own type): a log axis has no place for it, so it is named apart."""
    out: dict = {"series": {PLAIN: [], MATRIX: []}, "zero": []}
    for row in rows:
        if not row.get("ok", True) or row.get("size_bytes") is None or row.get("kld_mean") is None:
            continue
        if row["kld_mean"] <= 0:
            out["zero"].append(row["type"])
            continue
        out["series"][MATRIX if row.get("imatrix") else PLAIN].append(
            (row["size_bytes"] / 1e6, float(row["kld_mean"]), row["type"]))
    for points in out["series"].values():
        points.sort()
    return out


def entry_rows(entry: dict) -> list[dict]:
    """The quality store's entry (app/bench/quality_store.py: rows keyed 'Q4_K_M' or 'Q4_K_M+imatrix') as rows."""
    return [{"type": key.split("+")[0], "imatrix": key.endswith("+imatrix"), "ok": True, **figures}
            for key, figures in (entry.get("rows") or {}).items() if isinstance(figures, dict)]


def log_range(values: list[float]) -> tuple[int, int]:
    """Whole decades around the values, at least one wide: the log axis's bottom and top exponents."""
    low = math.floor(math.log10(min(values)))
    high = math.ceil(math.log10(max(values)))
    return low, max(high, low + 1)


def size_range(values: list[float], base_mb: float | None = None) -> tuple[float, float]:
    """The size axis: from a little below the smallest file to a little above the largest (or the base's), with room
    on the right for the largest point's label."""
    values = values + ([base_mb] if base_mb else [])
    low, high = min(values), max(values)
    pad = max((high - low) * 0.08, high * 0.03, 1.0)
    return max(0.0, low - pad), high + 2 * pad
