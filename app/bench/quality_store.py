"""`hearth bench quality` results kept for the window: data_dir()/bench/quality.json, one entry per model file.

Keyed by the model the user named (its resolved path; for the bundled model, the bundled file, though its F16
copy is the base). An entry holds the text and context scored and one row per type (`Q4_K_M`, `Q4_K_M+imatrix`);
a later run on the same text and context adds or replaces its types' rows, one on another text starts the entry
over (figures on two texts are not comparable). The KV cache types' rows (`--kv-types`) sit apart, under "kv"
({ctx, rows: {'q8_0': figures}}), merged the same way on the same KV context: they are the same file with another
cache, not quants a recommendation may pick. The quantize pane reads it (app/ui/models/quality_pane.py), the
Benchmark page charts it (app/ui/bench/quality_chart_view.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from app.core import paths
from app.core.store.jsonstore import is_object, read_json, update_json

KEPT = ("size_bytes", "kv_bytes", "mix", "kld_mean", "kld_p99", "kld_se", "same_top", "same_top_se", "ppl", "ppl_ratio",
        "positions")


def store_path() -> Path:
    return paths.data_dir() / "bench" / "quality.json"


def row_key(qtype: str, imatrix: bool) -> str:
    return qtype.upper() + ("+imatrix" if imatrix else "")


def save_quality(result: dict) -> Path:
    """Merge a `measure()` result into the store; returns the file."""
    key = str(Path(result["source"]).resolve())
    rows = {row_key(r["type"], r.get("imatrix", False)): {k: r[k] for k in KEPT if k in r}
            for r in result["rows"] if r.get("ok")}
    text, ctx = str(Path(result["text"]).expanduser().resolve()), result["ctx"]
    kv = result.get("kv") or {}
    kv_rows = {r["kv_type"]: {k: r[k] for k in KEPT if k in r} for r in kv.get("rows", []) if r.get("ok")}

    def change(data):
        data = data if isinstance(data, dict) else {}
        old = data.get(key)
        same = isinstance(old, dict) and old.get("text") == text and old.get("ctx") == ctx
        merged = dict(old["rows"]) if same else {}
        merged.update(rows)
        old_kv = old.get("kv") if same and isinstance(old.get("kv"), dict) else {}
        merged_kv = dict(old_kv.get("rows", {})) if old_kv.get("ctx") == kv.get("ctx", old_kv.get("ctx")) else {}
        merged_kv.update(kv_rows)
        data[key] = {"text": text, "ctx": ctx, "base": result["base"]["path"], "base_ppl": result["base"]["ppl"],
                     "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": merged}
        if merged_kv:
            data[key]["kv"] = {"ctx": kv.get("ctx", old_kv.get("ctx")), "rows": merged_kv}
        return data

    target = store_path()
    update_json(target, change, {}, valid=is_object)
    return target


def quality_for(model_path: str | Path) -> dict | None:
    """The kept entry for this model file ({text, ctx, base, rows: {key: figures}}), or None."""
    data = read_json(store_path(), {}, valid=is_object)
    entry = data.get(str(Path(model_path).resolve())) if isinstance(data, dict) else None
    return entry if isinstance(entry, dict) and isinstance(entry.get("rows"), dict) else None
