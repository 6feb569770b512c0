"""#29 in the window: the quantize row says, before the user starts, that the chosen model is already quantized
and what quantizing it again costs, and still lets them go on ("Quantize anyway")."""

from __future__ import annotations

from pathlib import Path

from tests.ui.conftest import shot

JOB_TIMEOUT_MS = 120_000


def choose(qtbot, w, path) -> None:
    w.tabs.setCurrentWidget(w.models)
    paths = lambda: [m["path"] for m in w.models.models]  # noqa: E731
    qtbot.waitUntil(lambda: str(path) in paths(), timeout=20_000)
    w.models.table.selectRow(paths().index(str(path)))
    qtbot.waitUntil(lambda: w.models._inspected is not None and w.models._inspected[0] == str(path),
                    timeout=10_000)


def test_an_already_quantized_source_is_said_before_quantizing_and_may_still_be_quantized(
        qtbot, idle_window, bundled_model, model_variant, tmp_path):
    w = idle_window
    models = w.models
    models.import_file(str(model_variant("F16")))
    qtbot.waitUntil(lambda: models.selected_path() == str(model_variant("F16")), timeout=20_000)  # imported
    choose(qtbot, w, bundled_model)  # Q4_1
    models.quant_type.setCurrentIndex(models.quant_type.findData("Q8_0"))
    note = models.requant_note.text()
    assert note.startswith(f"{bundled_model.name} is already quantized (Q4_1): quantizing it again to Q8_0 keeps "
                           "the first quantization's loss and adds its own, and a Q8_0 file (about")
    assert note.endswith("instead; Quantize anyway still makes the copy.") and "--allow-requantize" not in note
    assert models.requant_note.isVisibleTo(w) and models.quantize_button.text() == "Quantize anyway"
    models.quant_type.setCurrentIndex(models.quant_type.findData("Q4_0"))  # smaller: no size sentence
    assert "Q4_0 file (about" not in models.requant_note.text()
    assert "quantizing it again to Q4_0" in models.requant_note.text()
    # The pane is taller than the window: it scrolls, and the details keep the height their text needs (the
    # layout squeezed them to their title once the settings grew). Waited for: the row's relayout for the
    # button's new text comes in a later event-loop turn (50 ms was short on a busy machine: 250 of 264 px).
    qtbot.waitUntil(lambda: models.details.height() >= models.details.heightForWidth(models.details.width()),
                    timeout=3_000)
    shot(w, "requantize-note", tmp_path)

    choose(qtbot, w, model_variant("F16"))  # the original: nothing to say
    assert not models.requant_note.isVisibleTo(w) and models.quantize_button.text() == "Quantize"

    choose(qtbot, w, bundled_model)
    assert models.quantize_button.text() == "Quantize anyway"
    with qtbot.waitSignal(models.jobs.job_finished, timeout=JOB_TIMEOUT_MS) as finished:
        models.quantize_button.click()
    kind, path = finished.args
    assert kind == "quantize" and Path(path).name.endswith("-Q4_0.gguf") and Path(path).exists()
