"""#33 in the window: under the quantize row, each type's quality as `bench quality` kept it for the chosen model
("not measured yet" otherwise), and the recommendation with its threshold (the rule: app/core/quality_pick.py)."""

from __future__ import annotations

from tests.ui.test_quantize_note import choose

MB = 2**20


def test_measured_types_show_their_figures_and_the_recommendation_follows_the_threshold(
        qtbot, idle_window, bundled_model, tmp_path):
    from app.bench.quality_store import save_quality

    text = tmp_path / "mine.txt"
    text.write_text("my text")
    rows = [("Q8_0", False, 0.961, 145), ("Q4_K_M", False, 0.866, 105), ("Q4_K_M", True, 0.945, 105),
            ("Q4_0", False, 0.741, 92)]
    save_quality({"source": str(bundled_model), "text": str(text), "ctx": 256,
                  "base": {"path": "/f16.gguf", "ppl": 20.0},
                  "rows": [{"type": t, "imatrix": m, "ok": True, "same_top": s, "kld_mean": 0.01, "size_bytes": n * MB}
                           for t, m, s, n in rows]})
    w = idle_window
    choose(qtbot, w, bundled_model)
    pane = w.models.quality
    cells = {pane.table.item(r, 0).text(): [pane.table.item(r, c).text() for c in range(1, 6)]
             for r in range(pane.table.rowCount())}
    assert cells["Q8_0"][2] == "96.1%" and cells["Q8_0"][4] == "-"
    assert cells["Q4_K_M"][2:] == ["86.6%", "0.0100", "94.5%"]
    assert cells["Q6_K"][1] == "not measured yet"
    assert "mine.txt" in pane.about.text()
    qtbot.waitUntil(lambda: pane.room is not None, timeout=20_000)  # the fit estimate's room
    assert pane.advice.text().startswith("Recommended: Q4_K_M with the matrix")
    pane.threshold.setValue(0.5)
    assert pane.advice.text().startswith("Recommended: Q8_0")
    pane.threshold.setValue(25)
    assert pane.advice.text().startswith("Recommended: Q4_0 (")
    assert "within 25 points of Q8_0's 96.1%" in pane.advice.text()
