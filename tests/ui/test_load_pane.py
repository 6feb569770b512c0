"""#17: the load settings warn about a context beyond the trained one, offer the library's draft models that
share the vocabulary, and say what the engine decided about speculative decoding."""

from __future__ import annotations


def choose_first_model(qtbot, w) -> None:
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: w.models.selected_path() is not None, timeout=10_000)
    qtbot.waitUntil(lambda: w.models.load_settings.trained_ctx is not None, timeout=10_000)


def test_a_context_above_the_trained_one_is_marked_and_warned(qtbot, idle_window):
    w = idle_window
    choose_first_model(qtbot, w)
    settings = w.models.load_settings
    assert settings.trained_ctx == 8192
    settings.ctx.setCurrentIndex(settings.ctx.findData(4096))
    assert settings.ctx_warning.isHidden()
    index = settings.ctx.findData(131072)
    assert settings.ctx.itemText(index) == "131,072 tokens (above trained)"
    settings.ctx.setCurrentIndex(index)
    assert not settings.ctx_warning.isHidden() and "trained on 8,192 tokens" in settings.ctx_warning.text()


def test_draft_models_offered_are_the_smaller_library_models_with_the_same_vocabulary(qtbot, idle_window,
                                                                                      model_variant, tmp_path):
    from tests.helpers.tiny_gguf import write_unknown_arch

    w = idle_window
    q8, q4_0 = str(model_variant("Q8_0")), str(model_variant("Q4_0"))
    strange = str(write_unknown_arch(tmp_path / "strange.gguf"))
    for path in (q8, q4_0, strange):
        w.models.import_file(path)
    paths = lambda: [m["path"] for m in w.models.models]  # noqa: E731
    qtbot.waitUntil(lambda: {q8, q4_0, strange} <= set(paths()), timeout=30_000)
    w.tabs.setCurrentWidget(w.models)
    w.models.table.selectRow(paths().index(q8))
    settings = w.models.load_settings
    settings.spec_mode.setCurrentText("Draft model")
    offered = lambda: [settings.draft_choice.itemData(i) for i in range(settings.draft_choice.count())]  # noqa: E731
    qtbot.waitUntil(lambda: q4_0 in offered(), timeout=30_000)
    assert w.models.models[0]["path"] in offered()  # the bundled Q4_1 is smaller than Q8_0 and shares its words
    assert strange not in offered() and q8 not in offered()
    settings.draft_choice.setCurrentIndex(offered().index(q4_0))
    assert settings.options(q8).draft_model == q4_0


def test_the_fit_shown_before_load_counts_the_draft_model(qtbot, idle_window, model_variant):
    """#49.2: the Models page's fit counts the draft model chosen in the load settings, at its own context."""
    w = idle_window
    f16, q4_0 = str(model_variant("F16")), str(model_variant("Q4_0"))
    for path in (f16, q4_0):
        w.models.import_file(path)
    paths = lambda: [m["path"] for m in w.models.models]  # noqa: E731
    qtbot.waitUntil(lambda: {f16, q4_0} <= set(paths()), timeout=30_000)
    w.tabs.setCurrentWidget(w.models)
    w.models.table.selectRow(paths().index(f16))
    settings = w.models.load_settings
    settings.ctx.setCurrentIndex(settings.ctx.findData(32768))
    qtbot.waitUntil(lambda: "Fits" in w.models.fit_label.text(), timeout=20_000)
    assert "draft" not in w.models.fit_label.text()
    # Order: the mode, then the draft: each asks for the fit again, and the last answer is shown.
    settings.spec_mode.setCurrentText("Draft model")
    qtbot.waitUntil(lambda: settings.draft_choice.findData(q4_0) >= 0, timeout=20_000)
    settings.draft_choice.setCurrentIndex(settings.draft_choice.findData(q4_0))
    qtbot.waitUntil(lambda: "draft model" in w.models.fit_label.text(), timeout=20_000)
    assert "at 8,192 tokens of its own context" in w.models.fit_label.text()
    settings.spec_mode.setCurrentText("Off")
    qtbot.waitUntil(lambda: "draft model" not in w.models.fit_label.text(), timeout=20_000)
