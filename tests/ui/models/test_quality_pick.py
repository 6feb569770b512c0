"""The quantize pane's recommendation rule (app/ui/models/quality_pick.py) on given figures, and the store `bench
quality` writes for the pane (app/bench/quality_store.py)."""

from __future__ import annotations

import json

from app.ui.models.quality_pick import recommend

MB = 2**20
ROWS = {  # the measured figures for the bundled model's quants
    "Q8_0": {"same_top": 0.961, "size_bytes": 145 * MB},
    "Q6_K": {"same_top": 0.950, "size_bytes": 120 * MB},
    "Q4_K_M": {"same_top": 0.866, "size_bytes": 105 * MB},
    "Q4_K_M+imatrix": {"same_top": 0.945, "size_bytes": 105 * MB},
    "Q4_0": {"same_top": 0.741, "size_bytes": 92 * MB},
}


def test_the_smallest_type_within_the_threshold_of_q8_0_is_recommended():
    out = recommend(ROWS)
    assert out["pick"] == "Q4_K_M+imatrix" and out["reference"] == "Q8_0"
    assert "Q4_K_M with the matrix" in out["sentence"] and "within 2 points of Q8_0's 96.1%" in out["sentence"]
    # A looser threshold lets the plain 4-bit types in; a tighter one leaves only Q8_0.
    assert recommend(ROWS, threshold=25)["pick"] == "Q4_0"
    assert recommend(ROWS, threshold=0.5)["pick"] == "Q8_0"


def test_memory_the_fit_estimate_sees_rules_out_types_that_do_not_fit():
    # 100 MB of context and compute beside the file; 215 MB of room: Q8_0 (245) and Q6_K (220) do not fit.
    out = recommend(ROWS, room_mb=215, extra_mb=100, threshold=0.5)
    assert out["pick"] is None and out["closest"] == "Q4_K_M+imatrix"
    assert out["sentence"].startswith("No measured type is within 0.5 points") and "the best of those" in out["sentence"]
    out = recommend(ROWS, room_mb=50, extra_mb=100)
    assert out["pick"] is None and out["closest"] == "Q4_0" and "no measured type fits" in out["sentence"]


def test_without_q8_0_there_is_no_reference_to_hold_the_others_to():
    out = recommend({k: v for k, v in ROWS.items() if k != "Q8_0"})
    assert out["pick"] is None and out["sentence"].startswith("Q8_0 is not measured on this text yet")
    assert recommend({"Q8_0+imatrix": ROWS["Q8_0"]})["pick"] == "Q8_0+imatrix"


def test_bench_quality_results_are_kept_per_model_and_merged_on_the_same_text(tmp_path, monkeypatch):
    from app.bench.quality_store import quality_for, save_quality

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    model, text = tmp_path / "m.gguf", tmp_path / "t.txt"
    model.write_bytes(b"x")
    text.write_text("words")

    def result(rows, ctx=256):
        return {"source": str(model), "text": str(text), "ctx": ctx, "base": {"path": "/b.gguf", "ppl": 20.0},
                "rows": [dict(type=t, imatrix=m, ok=True, same_top=s, size_bytes=1, kld_mean=0.1) for t, m, s in rows]
                + [{"type": "IQ2_XS", "imatrix": False, "ok": False, "reason": "no"}]}

    path = save_quality(result([("Q8_0", False, 0.96)]))
    save_quality(result([("Q4_K_M", False, 0.86), ("Q4_K_M", True, 0.9)]))
    entry = quality_for(model)
    assert set(entry["rows"]) == {"Q8_0", "Q4_K_M", "Q4_K_M+imatrix"} and entry["rows"]["Q8_0"]["same_top"] == 0.96
    assert str(model.resolve()) in json.loads(path.read_text())
    save_quality(result([("Q4_0", False, 0.7)], ctx=128))  # another context: the figures start over
    assert set(quality_for(model)["rows"]) == {"Q4_0"}
    assert quality_for(tmp_path / "other.gguf") is None
