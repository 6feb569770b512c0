"""#17: the load settings warn about a context beyond the trained one, offer the library's draft models that
share the vocabulary, and say what the engine decided about speculative decoding."""

from __future__ import annotations


def choose_first_model(qtbot, w) -> None:
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: w.models.selected_path() is not None, timeout=10_000)
    qtbot.waitUntil(lambda: w.models.load_settings.trained_ctx is not None, timeout=10_000)


def import_each(qtbot, w, files: list[str]):
    """Import files one by one: a finished import selects its model, so each is waited for before the next
    (else a late one took the selection from the model the test chose)."""
    paths = lambda: [m["path"] for m in w.models.models]  # noqa: E731
    for path in files:
        w.models.import_file(path)
        qtbot.waitUntil(lambda: w.models.selected_path() == path, timeout=30_000)
    return paths


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
    paths = import_each(qtbot, w, [q8, q4_0, strange])
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
    paths = import_each(qtbot, w, [f16, q4_0])
    w.tabs.setCurrentWidget(w.models)
    w.models.table.selectRow(paths().index(f16))
    settings = w.models.load_settings
    settings.ctx.setCurrentIndex(settings.ctx.findData(32768))
    qtbot.waitUntil(lambda: "Fits" in w.models.fit_label.text(), timeout=45_000)
    assert "draft" not in w.models.fit_label.text()
    # Order: the mode, then the draft: each asks for the fit again, and the last answer is shown.
    settings.spec_mode.setCurrentText("Draft model")
    qtbot.waitUntil(lambda: settings.draft_choice.findData(q4_0) >= 0, timeout=45_000)
    settings.draft_choice.setCurrentIndex(settings.draft_choice.findData(q4_0))
    # Estimated from the files' sizes, this draft cannot pay and Load would leave it out (#55 D5: the fit counted
    # it all the same); ticked to load it anyway, the fit counts it.
    qtbot.waitUntil(lambda: bool(settings.draft_note.text()), timeout=45_000)
    if not settings.draft_verdict["pays"]:
        settings.draft_anyway.setChecked(True)
    qtbot.waitUntil(lambda: "draft model" in w.models.fit_label.text(), timeout=45_000)
    assert "at 8,192 tokens of its own context" in w.models.fit_label.text()
    settings.spec_mode.setCurrentText("Off")
    qtbot.waitUntil(lambda: "draft model" not in w.models.fit_label.text(), timeout=45_000)


def test_a_draft_that_cannot_pay_is_said_before_load_and_left_out_unless_insisted(qtbot, idle_window, model_variant,
                                                                                hearth_home):
    """#49.3: the engine said "not used: a draft token costs 89% of a target step" only after the load had paid
    for the draft. Before Load, from the kept measurements (else the files' sizes), the load settings say it;
    Load leaves such a draft out unless "Load it anyway" is ticked; the status bar says what the load does after
    the weights are read."""
    import json

    w = idle_window
    f16, q8, q4_0 = (str(model_variant(k)) for k in ("F16", "Q8_0", "Q4_0"))
    # Kept step costs of this machine (as the engine keeps them): the Q4_0 draft at 20% of the F16 target's step.
    facts = hearth_home / "data" / "machine.json"
    kept = json.loads(facts.read_text()) if facts.exists() else {}
    kept["spec_calibration"] = {
        "a": {"model": f16.rsplit("/", 1)[-1], "kind": "target",
              "costs": {"1": 0.010}, "when": "2026-01-01 00:00:00"},
        "b": {"model": q4_0.rsplit("/", 1)[-1], "kind": "draft", "costs": {"1": 0.002}, "when": "2026-01-01 00:00:00"}}
    facts.write_text(json.dumps(kept))
    paths = import_each(qtbot, w, [f16, q8, q4_0])
    w.tabs.setCurrentWidget(w.models)
    w.models.table.selectRow(paths().index(f16))
    settings = w.models.load_settings
    settings.spec_mode.setCurrentText("Draft model")
    # The candidates come from the vocabulary child (its first start takes seconds on a busy machine).
    qtbot.waitUntil(lambda: settings.draft_choice.findData(q8) >= 0, timeout=45_000)
    # Q8_0: nothing measured, its file is half the target's: it cannot pay.
    settings.draft_choice.setCurrentIndex(settings.draft_choice.findData(q8))
    qtbot.waitUntil(lambda: "cannot pay" in settings.draft_note.text(), timeout=45_000)
    assert "estimated from the two files' sizes" in settings.draft_note.text()
    assert settings.draft_anyway.isVisibleTo(w) and not settings.draft_anyway.isChecked()
    assert settings.options(f16).draft_model == q8 and settings.load_options(f16).draft_model is None
    # #55 D5: the fit counts what Load would load: without the draft it leaves out, with it once insisted on.
    qtbot.waitUntil(lambda: "draft model" not in w.models.fit_label.text() and bool(w.models.fit_label.text()),
                    timeout=45_000)
    settings.draft_anyway.setChecked(True)
    assert settings.load_options(f16).draft_model == q8
    assert "draft model" in w.models.fit_label.text()
    settings.draft_anyway.setChecked(False)
    assert "draft model" not in w.models.fit_label.text()
    # Q4_0: measured at 20% of a target step on this machine: it can pay, and nothing is left out.
    settings.draft_choice.setCurrentIndex(settings.draft_choice.findData(q4_0))
    qtbot.waitUntil(lambda: "can pay" in settings.draft_note.text() and "cannot" not in settings.draft_note.text(),
                    timeout=45_000)
    assert "as measured on this machine" in settings.draft_note.text() and "20%" in settings.draft_note.text()
    assert not settings.draft_anyway.isVisibleTo(w) and settings.load_options(f16).draft_model == q4_0
    # Back to Q8_0 and Load: the model loads without it; after the weights, the status bar says what follows.
    settings.draft_choice.setCurrentIndex(settings.draft_choice.findData(q8))
    qtbot.waitUntil(lambda: "cannot pay" in settings.draft_note.text(), timeout=45_000)
    said: list[str] = []
    w.bridge.load_progress.connect(lambda f: f >= 1.0 and said.append(w.state_label.text()))
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=60_000) as loaded:
        w.models.load_button.click()
    assert not loaded.args[0].get("drafter") and w.bridge.options.draft_model is None
    assert said and all(text == "Loading model… weights read; creating its context…" for text in said)
