"""A start paints the window before building its heavier pages (app/ui/shell/deferred_pages.py); a user never finds
one of them missing, empty, or unaware of the model that loaded before it existed."""

from __future__ import annotations

TABS = ["Chat", "Models", "Documents", "Tools", "Benchmark", "Connections", "Server"]


def tab_titles(w) -> list[str]:
    return [w.tabs.tabText(i) for i in range(w.tabs.count())]


def test_a_tab_opened_before_its_page_was_built_shows_its_page(qtbot, idle_window):
    w = idle_window  # no model loads, so the pages that wait for the first load are not built yet
    assert w.pages.built("server") is None and tab_titles(w) == TABS
    w.tabs.setCurrentIndex(TABS.index("Server"))
    page = w.pages.built("server")
    assert page is not None and w.tabs.currentWidget() is page is w.server
    qtbot.waitUntil(lambda: w.server.start_button.isVisible(), timeout=5_000)
    assert tab_titles(w) == TABS  # in its place, under its title


def test_the_pages_built_after_the_first_load_know_the_loaded_model(qtbot, main_window):
    w = main_window
    qtbot.waitUntil(w.pages.all_built, timeout=30_000)
    assert tab_titles(w) == TABS
    assert [w.tabs.widget(i) for i in range(2, 7)] == [w.documents, w.tools, w.bench, w.connections, w.server]
    assert "not trained for tools" in w.tools.model_line.text() or "trained for tools" in w.tools.model_line.text()
    model = w.bridge.info["model"]
    assert w.models.title(w.bridge.info) in w.bench.model_label.text()
    assert w.bridge.info["path"] == w.bench.model_path
    assert model.removesuffix(".gguf") in w.server.curl.toPlainText()
    assert list(w.monitor.series["engine_mb"].v)  # the monitor drew the loaded model's memory


def test_the_load_settings_learn_which_runtimes_offload_without_loading_llama_cpp(qtbot, main_window):
    # The window's process does not import llama.cpp to ask: the runtimes are probed in child processes (on a
    # worker thread), and the engine says with the loaded model whether its runtime offloads.
    settings = main_window.models.load_settings
    qtbot.waitUntil(lambda: settings.runtimes_read, timeout=30_000)
    offloads = bool(settings.runtime_row()["offloads"]) or (
        main_window.bridge.info["gpu_offload"] and main_window.bridge.info["runtime"]["name"] == "cpu")
    assert settings.gpu_layers.isEnabled() is offloads
    # Where layers stay on the CPU, the note speaks of runtimes (#31.10), not of rebuilding llama-cpp-python.
    assert ("hearth runtimes" in settings.gpu_reason.text()) is not offloads
    assert "CMAKE_ARGS" not in settings.gpu_reason.text()
