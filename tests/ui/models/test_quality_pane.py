"""#33 in the window: under the quantize row, each type's quality as `bench quality` kept it for the chosen model
("not measured yet" otherwise), and the recommendation with its threshold (the rule: app/ui/models/quality_pick.py)."""

from __future__ import annotations

from tests.ui.models.test_quantize_note import choose

MB = 2**20


def keep_figures(model, text, rows, base="/f16.gguf") -> None:
    """Keeps figures for model as `bench quality` on text would: rows of (type, imatrix, same_top, kld_mean, MB)."""
    from app.bench.quality_store import save_quality

    save_quality({"source": str(model), "text": str(text), "ctx": 256, "base": {"path": base, "ppl": 20.0},
                  "rows": [{"type": t, "imatrix": m, "ok": True, "same_top": s, "kld_mean": k, "size_bytes": n * MB}
                           for t, m, s, k, n in rows]})


def test_measured_types_show_their_figures_and_the_recommendation_follows_the_threshold(
        qtbot, idle_window, bundled_model, tmp_path):
    text = tmp_path / "mine.txt"
    text.write_text("my text")
    keep_figures(bundled_model, text, [("Q8_0", False, 0.961, 0.01, 145), ("Q4_K_M", False, 0.866, 0.01, 105),
                                       ("Q4_K_M", True, 0.945, 0.01, 105), ("Q4_0", False, 0.741, 0.01, 92)])
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


def test_the_benchmark_page_charts_the_kept_figures_size_against_kld(qtbot, idle_window, bundled_model, tmp_path):
    """#33: the Benchmark page's quality tab draws each kept type as a point (file size, mean KLD on a log axis),
    without and with the matrix as two series; the base measured as its own type (KLD 0) is named apart."""
    from app.bench.quality_chart import MATRIX, PLAIN

    text = tmp_path / "notes.md"
    text.write_text("my notes")
    keep_figures(bundled_model, text, [("Q8_0", False, 0.9, 0.0043, 145), ("Q4_0", False, 0.9, 0.298, 92),
                                       ("Q4_0", True, 0.9, 0.168, 92), ("Q4_1", False, 0.9, 0.0, 98)],
                 base="/models/smollm2-F16.gguf")
    w = idle_window
    w.tabs.setCurrentWidget(w.bench)
    w.bench.views.setCurrentWidget(w.bench.quality)  # shown: it reads the store again
    chart = w.bench.quality
    mb = MB / 1e6
    assert chart.points["series"][PLAIN] == [(92 * mb, 0.298, "Q4_0"), (145 * mb, 0.0043, "Q8_0")]
    assert chart.points["series"][MATRIX] == [(92 * mb, 0.168, "Q4_0")] and chart.points["zero"] == ["Q4_1"]
    assert "on notes.md (256 tokens of context)" in chart.caption.text()
    assert "KLD 0 (the base itself): Q4_1" in chart.caption.text()
    w.bench.set_model(str(tmp_path / "other.gguf"))  # a model with no figures kept
    assert "Quality not measured yet for other.gguf" in chart.caption.text()
    assert not any(chart.points["series"].values())
