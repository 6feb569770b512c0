"""What `hearth bench matrix` measures: its configurations (rows), its workloads, and the options of a run.

The rows are the reference article's ladder (see app/bench/matrix.py); a run may pick rows and change a row's
settings (`--rows`, `--set ROW.KEY=VALUE`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.errors import HearthError
from app.core.gguf.quant_types import QUANTIZE_TYPES, label

ROWS = [
    {"id": "f16", "label": "F16 baseline", "qtype": "F16"},
    {"id": "q8_0", "label": label("Q8_0"), "qtype": "Q8_0"},
    {"id": "q4_k_m", "label": label("Q4_K_M"), "qtype": "Q4_K_M"},
    {"id": "q4_k_m_spec", "label": "Q4_K_M + speculative", "qtype": "Q4_K_M", "spec": True},
    {"id": "combined", "label": "combined", "qtype": "Q4_K_M", "spec": True, "kv_type": "q8_0",
     "flash_attn": "on", "gpu": True},
]
BASELINE = "f16"

CODE = '''def summarize_orders(orders, tax_rate=0.2):
    """Group orders by customer and compute totals with tax."""
    totals = {}
    for order in orders:
        customer = order["customer"]
        amount = order["quantity"] * order["unit_price"]
        if order.get("discount"):
            amount -= amount * order["discount"]
        totals.setdefault(customer, 0.0)
        totals[customer] += amount
    report = []
    for customer, subtotal in sorted(totals.items()):
        tax = subtotal * tax_rate
        report.append({
            "customer": customer,
            "subtotal": round(subtotal, 2),
            "tax": round(tax, 2),
            "total": round(subtotal + tax, 2),
        })
    grand = sum(item["total"] for item in report)
    return report, round(grand, 2)
'''

WORKLOADS = {
    "chat": {
        "label": "free-form chat",
        "messages": [{"role": "user", "content": "Tell me about the history of tea and how it spread around the "
                      "world. Write several paragraphs."}],
        "max_tokens": 128,
    },
    "code": {
        "label": "code editing",
        "messages": [{"role": "user", "content": "Rewrite this Python function with the variable `totals` renamed "
                      "to `by_customer`. Change nothing else and reply with the code only.\n\n```python\n"
                      + CODE + "```"}],
        "max_tokens": 320,
    },
}
QUICK_TOKENS = {"chat": 24, "code": 48}
PP_TOKENS = 512
N_CTX = 2048

# gpu: all layers on the GPU (where the build can offload); only the combined row has it by default, so that the
# ladder on a CPU machine reads as the article's; on a GPU machine every row can be set on (the GPU check does).
OVERRIDABLE = {"qtype": QUANTIZE_TYPES, "kv_type": ("f16", "q8_0", "q4_0"), "flash_attn": ("on", "off", "auto"),
               "gpu": ("on", "off")}


@dataclass
class MatrixOptions:
    """A run of the matrix as `hearth bench matrix` takes it (app/commands/bench.py builds it from the flags)."""

    model: str | None = None  # GGUF file or library name; None: the bundled model
    threads: int | None = None  # None: physical cores
    repeats: int = 3
    quick: bool = False
    draft_model: str | None = None
    rows: str | None = None  # "f16,combined"
    settings: list[str] = field(default_factory=list)  # ["combined.kv_type=q4_0"]
    timeout: float = 600.0
    interleave: bool = True
    json: bool = False
    csv: str | None = None
    plot: str | None = None
    no_save: bool = False
    no_quality: bool = False  # skip the quality columns (mean KLD, same top token against F16)
    quality_text: str | None = None  # the text the quality columns score (default: a built-in one)


def choose_rows(rows: list[str] | None, overrides: dict[str, dict] | None) -> list[dict]:
    ids = [r["id"] for r in ROWS]
    for rid in list(rows or []) + list(overrides or {}):
        if rid not in ids:
            raise HearthError(f"There is no configuration '{rid}' in the matrix; use one of {', '.join(ids)}.")
    for rid, changes in (overrides or {}).items():
        for key, value in changes.items():
            if key not in OVERRIDABLE or value not in OVERRIDABLE[key]:
                raise HearthError(f"'{rid}.{key}={value}' cannot be set; settable: "
                                  + "; ".join(f"{k} ({', '.join(v)})" for k, v in OVERRIDABLE.items()) + ".")
    chosen = [dict(r, **(overrides or {}).get(r["id"], {})) for r in ROWS if rows is None or r["id"] in rows]
    for row in chosen:
        if isinstance(row.get("gpu"), str):
            row["gpu"] = row["gpu"] == "on"
    return chosen


def parse_settings(items: list[str]) -> dict[str, dict]:
    """['combined.flash_attn=off'] -> {'combined': {'flash_attn': 'off'}}"""
    out: dict[str, dict] = {}
    for item in items:
        target, sep, value = item.partition("=")
        rid, dot, key = target.partition(".")
        if not (sep and dot and rid and key):
            raise HearthError(f"'{item}' is not ROW.KEY=VALUE, for example combined.kv_type=q4_0.")
        value = value.strip()
        out.setdefault(rid.strip(), {})[key.strip()] = value.upper() if key.strip() == "qtype" else value
    return out

