"""Which quant to recommend from measured quality (issue #33): the smallest type whose same-top-token share is
within `threshold` points of Q8_0's on the user's text, and which fits the memory the fit estimate sees.

Qt-free: the quantize pane (app/ui/models/quality_pane.py) shows what this returns; tests give it figures.
"""

from __future__ import annotations

from app.core.units import human_size

MB = 2**20
REFERENCE = "Q8_0"
DEFAULT_THRESHOLD = 2.0  # points of same-top-token share


def needed_mb(row: dict, extra_mb: float) -> float:
    """Memory a quant needs: its file (the weights are mapped and touched) plus what the fit estimate adds for the
    context, the compute buffers and the engine (the same for every quant of one model)."""
    return row["size_bytes"] / MB + extra_mb


def recommend(rows: dict[str, dict], room_mb: float | None = None, extra_mb: float = 0.0,
              threshold: float = DEFAULT_THRESHOLD) -> dict:
    """rows: {'Q4_K_M' or 'Q4_K_M+imatrix': {'same_top': 0..1, 'size_bytes': n, ...}}; room_mb: the memory the fit
    estimate sees (None: do not check). Returns {'pick', 'closest', 'reference', 'sentence'}: pick is the key
    recommended or None, closest the nearest key when none qualifies."""
    measured = {k: r for k, r in rows.items() if isinstance(r, dict) and "same_top" in r and "size_bytes" in r}
    ref_key = next((k for k in (REFERENCE, REFERENCE + "+imatrix") if k in measured), None)
    if ref_key is None:
        return {"pick": None, "closest": None, "reference": None,
                "sentence": f"{REFERENCE} is not measured on this text yet: measure it, the reference the others are "
                            "held to."}
    ref = measured[ref_key]["same_top"]
    floor = ref - threshold / 100 - 1e-9

    def fits(row: dict) -> bool:
        return room_mb is None or needed_mb(row, extra_mb) <= room_mb

    good = [k for k, r in measured.items() if r["same_top"] >= floor and fits(r)]
    if good:
        pick = min(good, key=lambda k: (measured[k]["size_bytes"], -measured[k]["same_top"]))
        r = measured[pick]
        return {"pick": pick, "closest": None, "reference": ref_key,
                "sentence": f"Recommended: {_name(pick)} ({human_size(r['size_bytes'])}, same top token "
                            f"{100 * r['same_top']:.1f}%), the smallest type within {threshold:g} points of "
                            f"{REFERENCE}'s {100 * ref:.1f}% on this text that fits in memory."}
    fitting = [k for k in measured if fits(measured[k])]
    if fitting:
        closest = max(fitting, key=lambda k: (measured[k]["same_top"], -measured[k]["size_bytes"]))
        why = "the best of those that fit"
    else:
        closest = min(measured, key=lambda k: measured[k]["size_bytes"])
        why = "no measured type fits; this is the smallest"
    r = measured[closest]
    return {"pick": None, "closest": closest, "reference": ref_key,
            "sentence": f"No measured type is within {threshold:g} points of {REFERENCE}'s {100 * ref:.1f}% same top "
                        f"token and fits in memory; the closest is {_name(closest)} ({100 * r['same_top']:.1f}%, "
                        f"{human_size(r['size_bytes'])}: {why})."}


def _name(key: str) -> str:
    return key.replace("+imatrix", " with the matrix")
