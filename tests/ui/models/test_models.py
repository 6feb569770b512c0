"""The Models page against real parts: a local Hub-shaped server, llama.cpp's quantizer, the fit estimate."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel

from app.core import paths
from app.core.library.hub import recommended_models

JOB_TIMEOUT_MS = 60_000


def open_download_tab(qtbot, w):
    w.tabs.setCurrentWidget(w.models)
    with qtbot.waitSignal(w.models.hub.results_shown, timeout=10_000) as shown:
        w.models.sources.setCurrentWidget(w.models.hub)
    return shown.args[0]


def search(qtbot, w, text: str) -> int:
    w.models.hub.query.setText(text)
    with qtbot.waitSignal(w.models.hub.results_shown, timeout=20_000) as shown:
        w.models.hub.search_button.click()
    return shown.args[0]


def library_paths(w) -> list[str]:
    return [m["path"] for m in w.models.models]


def test_empty_query_shows_the_recommended_models(qtbot, idle_window):
    w = idle_window
    count = open_download_tab(qtbot, w)
    expected = recommended_models()
    assert count == len(expected) == w.models.hub.tree.topLevelItemCount()
    first = w.models.hub.tree.topLevelItem(0)
    assert first.text(0) == expected[0]["name"] and "Q4_K_M" in first.text(1) and "INT4" in first.text(1)
    assert expected[0]["good_at"] in first.child(0).text(0)


def test_search_download_with_progress_joins_the_library(qtbot, idle_window, hub_server):
    w = idle_window
    open_download_tab(qtbot, w)
    assert search(qtbot, w, "gguf") == 3
    hub = w.models.hub
    names = {hub.tree.topLevelItem(i).text(0).split()[0] for i in range(hub.tree.topLevelItemCount())}
    assert names == {"acme/Tiny-GGUF", "acme/Big-GGUF", "acme/Gated-GGUF"}
    assert hub.select("acme/Big-GGUF", "big-F16.gguf")
    hub_server.rate = 16 * 2**20  # 8 MB in about half a second: long enough to watch the bar move
    seen: list[int] = []
    w.models.jobs.bar.valueChanged.connect(seen.append)
    with qtbot.waitSignal(w.models.jobs.job_finished, timeout=JOB_TIMEOUT_MS) as finished:
        hub.download_button.click()
        assert w.models.jobs.isVisible() and w.models.jobs.cancel_button.isEnabled()
    kind, path = finished.args
    assert kind == "download" and Path(path).is_relative_to(paths.models_dir())
    assert Path(path).stat().st_size == len(hub_server.repos["acme/Big-GGUF"].files["big-F16.gguf"])
    assert len(seen) >= 2 and seen == sorted(seen), "the bar moved forward during the download"
    assert not w.models.jobs.isVisible()
    # The library refreshed with the new file, chosen, with its type read from the file.
    qtbot.waitUntil(lambda: w.models.selected_path() == path, timeout=10_000)
    row = w.models.models[library_paths(w).index(path)]
    assert row["quant"] == "F16"
    assert "Downloaded big-F16.gguf" in w.models.status.text()


def test_cancel_a_download_and_errors_reach_the_message_bridge(qtbot, idle_window, hub_server):
    w = idle_window
    open_download_tab(qtbot, w)
    search(qtbot, w, "big")
    hub_server.rate = 2 * 2**20  # four seconds for 8 MB: time to cancel
    messages: list[str] = []
    w.models.noticed.connect(lambda notice: messages.append(notice.text))
    w.models.hub.select("acme/Big-GGUF", "big-F16.gguf")
    w.models.hub.download_button.click()
    qtbot.waitUntil(lambda: w.models.jobs.bar.value() > 0, timeout=10_000)
    with qtbot.waitSignal(w.models.jobs.job_cancelled, timeout=10_000):
        w.models.jobs.cancel_button.click()
    assert messages and "cancel" in messages[-1].lower() and "#ef4444" not in w.models.status.text()
    assert not w.models.jobs.isVisible()
    assert "cancel" in w.statusBar().currentMessage().lower()
    assert not any(p.endswith("big-F16.gguf") for p in library_paths(w))
    # A gated repository: one sentence, no traceback, and the page stays usable.
    search(qtbot, w, "gated")
    w.models.hub.select("acme/Gated-GGUF", None)
    with qtbot.waitSignal(w.models.jobs.job_failed, timeout=JOB_TIMEOUT_MS) as failed:
        w.models.hub.download_button.click()
    assert "gated" in failed.args[0].lower() and "Traceback" not in failed.args[0]
    assert "\n" not in failed.args[0].strip()


def test_quantize_an_imported_model_with_progress_and_see_the_copy_described(qtbot, idle_window, model_variant):
    """An imported file is listed after Hearth's own models, so its new copy takes the row it had: the copy is
    chosen and described, not the file it was made from (#31.6)."""
    w = idle_window
    source = model_variant("F16")
    w.tabs.setCurrentWidget(w.models)
    w.models.import_file(str(source))
    qtbot.waitUntil(lambda: w.models.selected_path() == str(source), timeout=20_000)
    qtbot.waitUntil(lambda: source.name in w.models.details.text().replace("&#8203;", ""), timeout=10_000)
    row = library_paths(w).index(str(source))
    w.models.quant_type.setCurrentIndex(w.models.quant_type.findData("Q8_0"))
    assert w.models.quant_type.currentText() == "Q8_0 (INT8)"
    updates = w.models.jobs.updates
    label = w.models.jobs.label
    with qtbot.waitSignal(w.models.jobs.job_finished, timeout=JOB_TIMEOUT_MS) as finished:
        w.models.quantize_button.click()
        qtbot.wait(1)  # the layout's turn
        # The job's title is read whole, the model's name and the type (it showed "Quantizing smollm2-").
        assert label.text() == f"Quantizing {source.name} to Q8_0" and QLabel.text(label) == label.text()
        assert label.fontMetrics().horizontalAdvance(label.text()) <= label.contentsRect().width()
    kind, path = finished.args
    assert kind == "quantize" and Path(path).exists() and Path(path).name.endswith("-Q8_0.gguf")
    assert w.models.jobs.updates > updates
    qtbot.waitUntil(lambda: w.models.selected_path() == path, timeout=10_000)
    assert w.models.models[library_paths(w).index(path)]["quant"] == "Q8_0"
    assert library_paths(w).index(path) == row  # the case where Qt's selection does not change
    qtbot.waitUntil(lambda: Path(path).name in w.models.details.text().replace("&#8203;", ""), timeout=10_000)
    assert source.name not in w.models.details.text().replace("&#8203;", "")


def test_fit_verdict_marks_the_suggested_gpu_layers(qtbot, idle_window, bundled_model):
    w = idle_window
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: str(bundled_model) in library_paths(w), timeout=20_000)
    w.models.table.selectRow(library_paths(w).index(str(bundled_model)))
    slider = w.models.load_settings.gpu_layers
    qtbot.waitUntil(lambda: slider.mark is not None and w.models.fit_label.text() != "", timeout=20_000)
    from app.core.library.fit import estimate_fit

    expected = estimate_fit(bundled_model, n_ctx=w.models.load_settings.ctx.currentData(),
                            kv_type=w.models.load_settings.kv_type.currentText())
    assert slider.mark == expected.gpu_layers and slider.maximum() == expected.n_layers
    assert expected.verdict.split(",")[0] in w.models.fit_label.text()  # free RAM moves between the two
    assert f"suggested {expected.gpu_layers}" in w.models.load_settings.gpu_value.text()
    x = slider.mark_x()
    assert 0 <= x <= slider.width()


def test_convert_a_folder_that_is_not_a_checkpoint_says_why(qtbot, idle_window, tmp_path):
    w = idle_window
    w.tabs.setCurrentWidget(w.models)
    panel = w.models.converter
    w.models.sources.setCurrentWidget(panel)
    qtbot.waitUntil(lambda: panel.convert_button.isEnabled() or panel.missing.text() != "", timeout=10_000)
    if not panel.convert_button.isEnabled():  # no convert extra: the page says what to install
        assert 'pip install "hearth[convert]"' in panel.missing.text()
        return
    (tmp_path / "notes.txt").write_text("not a model")
    panel.source.setText(str(tmp_path))
    with qtbot.waitSignal(w.models.jobs.job_failed, timeout=JOB_TIMEOUT_MS) as failed:
        panel.convert_button.click()
    assert "config.json" in failed.args[0] and "Traceback" not in failed.args[0]
    assert failed.args[0] in w.statusBar().currentMessage()


def test_a_slow_older_fit_never_replaces_the_verdict_for_the_settings_now_chosen(qtbot, idle_window, bundled_model,
                                                                                  monkeypatch):
    """Each change of the load settings asks for a fit on a thread of its own, and threads end in any order. An
    older verdict that arrived last stayed (CI saw the CPU's "Fits in RAM" under the Vulkan runtime chosen)."""
    import threading

    from app.ui.models import manager

    w = idle_window
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: str(bundled_model) in library_paths(w), timeout=20_000)
    w.models.table.selectRow(library_paths(w).index(str(bundled_model)))
    qtbot.waitUntil(lambda: w.models.fit_label.text() != "", timeout=20_000)
    ctx = w.models.load_settings.ctx
    older, newer = [ctx.itemData(i) for i in range(ctx.count()) if i != ctx.currentIndex()][:2]
    release, asked_older = threading.Event(), threading.Event()
    real_fit = manager.fit

    def fit(path, n_ctx, *args):
        if n_ctx == older:  # the older question is answered only after the newer one was shown
            asked_older.set()
            release.wait(30)
        return real_fit(path, n_ctx, *args)

    monkeypatch.setattr(manager, "fit", fit)
    ctx.setCurrentIndex(ctx.findData(older))
    qtbot.waitUntil(asked_older.is_set, timeout=10_000)
    ctx.setCurrentIndex(ctx.findData(newer))
    kv = w.models.load_settings.kv_type.currentText()
    needs = real_fit(str(bundled_model), newer, kv)["verdict"].split(",")[0]  # free RAM moves between the two
    qtbot.waitUntil(lambda: needs in w.models.fit_label.text(), timeout=20_000)
    release.set()
    qtbot.waitUntil(lambda: not w.models.tasks.busy(), timeout=20_000)
    assert needs in w.models.fit_label.text()
    assert real_fit(str(bundled_model), older, kv)["verdict"].split(",")[0] not in w.models.fit_label.text()


def test_an_unreachable_hugging_face_is_said_once_on_the_page_and_once_on_the_status_bar(qtbot, hearth_home,
                                                                                           monkeypatch):
    """#55 F: offline, a failed search and then a failed download said "Cannot reach Hugging Face" in three places
    at once: the search's note, the page's red line and the status bar."""
    import socket

    from tests.ui.conftest import opened_window

    with socket.socket() as probe:  # a port nothing listens on: what an offline machine meets
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{dead}")
    with opened_window(qtbot, load=False) as w:
        open_download_tab(qtbot, w)  # the recommended list is Hearth's own: no network needed
        hub = w.models.hub
        hub.query.setText("qwen")
        with qtbot.waitSignal(hub.error_reported, timeout=20_000) as failed:
            hub.search_button.click()
        said = failed.args[0]
        assert "Cannot reach Hugging Face" in said and "Traceback" not in said
        assert "qwen" in hub.note.text() and said not in hub.note.text()

        def places() -> list[str]:
            shown = [label.text() for label in w.findChildren(QLabel) if label.isVisible()]
            return [text for text in shown if "Cannot reach Hugging Face" in text]

        assert len(places()) == 2 and said in w.statusBar().currentMessage()
        hub.tree.setCurrentItem(hub.tree.topLevelItem(0))
        with qtbot.waitSignal(w.models.jobs.job_failed, timeout=JOB_TIMEOUT_MS) as failed:
            hub.download_button.click()
        assert "Cannot reach Hugging Face" in failed.args[0]
        assert len(places()) == 2, places()
