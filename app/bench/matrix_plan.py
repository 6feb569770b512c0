"""What `hearth bench matrix` measures: its configurations (rows), its workloads, and the options of a run.

The rows are the reference article's ladder (see app/bench/matrix.py); a run may pick rows and change a row's
settings (`--rows`, `--set ROW.KEY=VALUE`).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.errors import HearthError
from app.core.gguf.quant_types import QUANTIZE_TYPES, label
from app.protocol.messages import FLASH_ATTN, KV_TYPES
from app.protocol.option_spec import POSITIVE_SECONDS, count, option

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
OVERRIDABLE = {"qtype": QUANTIZE_TYPES, "kv_type": KV_TYPES, "flash_attn": FLASH_ATTN, "gpu": ("on", "off")}


@dataclass
class MatrixOptions:
    """A run of the matrix as `hearth bench matrix` takes it (app/commands/bench.py builds it from the flags)."""

    model: str | None = None  # GGUF file or library name; None: the bundled model
    threads: int | None = None  # None: physical cores
    repeats: int = option(3, "--repeats", "runs per figure (default {default})", "N", bound=count(1, "runs"))
    quick: bool = option(False, "--quick", "short answers and one run each: a first look")
    draft_model: str | None = option(None, "--draft-model", "also try this draft model in the speculative rows",
                                     "PATH|NAME")
    rows: str | None = option(None, "--rows", f"only these configurations ({', '.join(r['id'] for r in ROWS)})",
                              "ID,...")  # "f16,combined"
    settings: list[str] = option(flag="--set", help="change a configuration, e.g. combined.kv_type=q4_0 (keys: "
                                 "qtype, kv_type, flash_attn)", metavar="ROW.KEY=VALUE", repeat=True,
                                 default_factory=list)  # ["combined.kv_type=q4_0"]
    timeout: float = option(600.0, "--timeout", "stop a configuration after S seconds and mark it failed (default "
                            "{default})", "S", bound=POSITIVE_SECONDS)
    interleave: bool = option(True, "--no-interleave", "run each configuration's repeats in one process instead of "
                              "in rounds over all of them (fewer model loads, for big models; less fair when other "
                              "programs run)", negate=True)
    json: bool = option(False, "--json", "print the whole result as JSON")
    csv: str | None = option(None, "--csv", "also write the table as CSV", "PATH")
    plot: str | None = option(None, "--plot", "also write a bar chart PNG", "PATH")
    no_save: bool = option(False, "--no-save", "do not keep the result under the data folder's bench/")
    quality_text: str | None = option(None, "--quality-text", "score the quality columns (mean KLD, same top token "
                                      "against F16) on this text instead of the built-in one", "FILE")
    no_quality: bool = option(False, "--no-quality", "leave out the quality columns")


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

