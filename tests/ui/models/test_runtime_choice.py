"""#28 in the window: the load settings offer the engine runtimes installed here, each with its device and free
memory; the GPU note speaks of runtimes (#31.10); after a load the status bar, the load pane and the monitor say
where the model runs ("Vulkan · 31/31 layers on llvmpipe").

The Vulkan test runs on lavapipe (Mesa's Vulkan device on the CPU) with the runtime tests/run.sh builds; without
it that test skips. ggml lists lavapipe only when GGML_VK_VISIBLE_DEVICES names it, so the test names it."""

from __future__ import annotations

import pytest

from app.core.making import runtimes as rt
from app.ui.models.runtime_text import NO_GPU_RUNTIME
from tests.core.making.test_runtimes import CACHE, lavapipe_runtime
from tests.ui.conftest import shot

LOAD_TIMEOUT_MS = 120_000
N_LAYER = 30  # the bundled model's; llama.cpp counts its output layer as one more


def runtime_entries(settings) -> list[tuple[str, str]]:
    return [(settings.runtime.itemData(i), settings.runtime.itemText(i)) for i in range(settings.runtime.count())]


def models_page(qtbot, w):
    w.tabs.setCurrentWidget(w.models)
    settings = w.models.load_settings
    qtbot.waitUntil(lambda: settings.runtimes_read and w.models.selected_path() is not None, timeout=30_000)
    return settings


@pytest.fixture
def no_gpu_runtime(monkeypatch, tmp_path):
    """A machine where no GPU runtime was ever built (the default install)."""
    monkeypatch.setenv(rt.RUNTIMES_DIR_ENV, str(tmp_path / "runtimes"))
    monkeypatch.delenv("GGML_VK_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def lavapipe(monkeypatch) -> rt.Runtime:
    """The Vulkan runtime built by tests/run.sh, with lavapipe named as its device."""
    monkeypatch.setenv(rt.RUNTIMES_DIR_ENV, str(CACHE))
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "0")
    return lavapipe_runtime()


def test_without_a_gpu_runtime_only_auto_and_cpu_are_offered_and_the_note_says_how_to_get_one(
        qtbot, no_gpu_runtime, idle_window, tmp_path):
    w = idle_window
    settings = models_page(qtbot, w)
    assert runtime_entries(settings) == [("auto", "auto: CPU"), ("cpu", "cpu")]
    assert not settings.gpu_layers.isEnabled()
    note = settings.gpu_reason.text()
    assert note == NO_GPU_RUNTIME and settings.gpu_reason.isVisibleTo(w)
    assert "hearth runtimes build vulkan" in note and "CMAKE_ARGS" not in note and "llama-cpp-python" not in note
    shot(w, "runtime-none", tmp_path)
    # The default load options (Settings) offer the same runtimes, and no chat template: that is per model.
    dialog = w.open_settings()
    defaults = dialog.load_defaults
    assert runtime_entries(defaults) == runtime_entries(settings)
    assert not defaults.template.isVisibleTo(dialog) and defaults.runtime.isVisibleTo(dialog)
    dialog.reject()


@pytest.mark.slow
def test_a_model_loaded_on_the_vulkan_runtime_says_where_it_runs(qtbot, lavapipe, idle_window, bundled_model,
                                                                 tmp_path):
    w = idle_window
    settings = models_page(qtbot, w)
    entries = dict(runtime_entries(settings))
    assert list(entries) == ["auto", "cpu", "vulkan"]
    assert entries["vulkan"].startswith("vulkan · llvmpipe · ") and entries["vulkan"].endswith(" free")
    assert entries["auto"].startswith("auto: Vulkan on llvmpipe")  # lavapipe was named, so auto takes it
    settings.runtime.setCurrentIndex(settings.runtime.findData("cpu"))
    assert not settings.gpu_layers.isEnabled()
    assert settings.gpu_reason.text().startswith("The cpu runtime computes every layer on the CPU; choose vulkan")
    settings.runtime.setCurrentIndex(settings.runtime.findData("vulkan"))
    assert settings.gpu_layers.isEnabled() and not settings.gpu_reason.isVisibleTo(w)
    # The fit verdict takes the chosen runtime's device and its free memory (#28: it said "Fits in RAM" and
    # suggested 0 layers with Vulkan chosen), and names it.
    qtbot.waitUntil(lambda: "layers on llvmpipe" in w.models.fit_label.text(), timeout=30_000)
    settings.gpu_layers.setValue(settings.gpu_layers.maximum())  # all
    assert w.models.selected_path() == str(bundled_model)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS) as loaded:
        w.models.load_button.click()
    info = loaded.args[0]
    assert info["runtime"]["name"] == "vulkan" and info["gpu_layers"] == N_LAYER + 1
    where = f"Vulkan · {N_LAYER + 1}/{N_LAYER + 1} layers on llvmpipe"
    assert w.runtime_label.text() == where
    assert "llvmpipe (LLVM" in w.runtime_label.toolTip()  # the device in full
    assert f"Runs on {where}." in w.models.loaded_note.text()
    # Remembered for this model, as its other load settings are.
    assert w.models.per_model[str(bundled_model)]["runtime"] == "vulkan"
    monitor = w.monitor
    if info.get("gpu_mb") is not None:  # the device reports its memory: the graph names the device
        assert ("llvmpipe used", "#0ea5e9", False) in monitor.legends["memory"]
    assert where in monitor.notes["memory"]
    shot(w, "runtime-vulkan", tmp_path)
