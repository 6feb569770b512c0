"""Loading in the window loses nothing: a model too big, a file llama.cpp refuses, a cancelled load.

Each starts from the bundled model loaded and chatting, and ends with a model loaded and chatting."""

from __future__ import annotations

from pathlib import Path

from tests.ui.conftest import ask
from tests.helpers.tiny_gguf import write_oversized, write_unknown_arch

LOAD_TIMEOUT_MS = 60_000


def select_in_library(qtbot, w, path: Path) -> None:
    w.tabs.setCurrentWidget(w.models)
    w.models.import_file(str(path))
    paths = lambda: [m["path"] for m in w.models.models]  # noqa: E731
    qtbot.waitUntil(lambda: str(path) in paths(), timeout=10_000)
    w.models.table.selectRow(paths().index(str(path)))


def refused_load(qtbot, w, path: Path) -> str:
    """Select the file in the library, click Load, and return the sentence the window reports."""
    select_in_library(qtbot, w, path)
    with qtbot.waitSignal(w.bridge.load_failed, timeout=LOAD_TIMEOUT_MS) as failed:
        w.models.load_button.click()
    return failed.args[0]


def test_a_model_too_big_is_refused_with_the_verdict_and_the_chat_goes_on(qtbot, main_window, tmp_path):
    w = main_window
    bundled = w.bridge.info["path"]
    message = refused_load(qtbot, w, write_oversized(tmp_path / "huge-64g.gguf"))
    assert message.startswith("Does not fit: huge-64g.gguf")
    assert "Does not fit" in w.models.status.text() and "Does not fit" in w.statusBar().currentMessage()
    # The engine refused it before letting go of the bundled model: still loaded, nothing reloaded.
    assert w.bridge.ready and w.bridge.info["path"] == bundled
    assert w.state_label.text() == "Ready"
    # A second click would load it anyway; choosing another model takes that back.
    assert w.models.load_button.text() == "Load anyway"
    w.models.table.selectRow(0 if w.models.models[0]["path"] != str(tmp_path / "huge-64g.gguf") else 1)
    assert w.models.load_button.text() == "Load model"
    w.tabs.setCurrentWidget(w.chat)
    assert ask(qtbot, w, "Hello!", max_tokens=5)["completion_tokens"] == 5


def test_a_file_llama_cpp_refuses_says_why_and_the_model_before_comes_back(qtbot, main_window, tmp_path):
    w = main_window
    bundled = w.bridge.info["path"]
    message = refused_load(qtbot, w, write_unknown_arch(tmp_path / "strange.gguf"))
    assert "strange.gguf" in message and "hearthtestarch" in message
    assert message.endswith(f"Loading {Path(bundled).name} again.")
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS) as loaded:
        pass
    assert loaded.args[0]["path"] == bundled and w.bridge.ready
    w.tabs.setCurrentWidget(w.chat)
    assert ask(qtbot, w, "Hello!", max_tokens=5)["completion_tokens"] == 5


def test_cancel_loading_brings_back_the_model_before(qtbot, main_window, model_variant):
    w = main_window
    bundled = w.bridge.info["path"]
    pid = w.bridge.pid
    select_in_library(qtbot, w, model_variant("Q8_0"))
    progress: list[float] = []

    def cancel_at_first_progress(fraction: float) -> None:
        progress.append(fraction)
        if len(progress) == 1:
            w.models.cancel_button.click()

    w.bridge.load_progress.connect(cancel_at_first_progress)
    w.models.load_button.click()
    assert w.models.cancel_button.isEnabled()
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS) as loaded:
        pass
    w.bridge.load_progress.disconnect(cancel_at_first_progress)
    assert progress, "no load progress reached the window"
    assert loaded.args[0]["path"] == bundled and w.bridge.pid != pid  # a fresh engine with the old model
    assert "was cancelled" in w.models.status.text() and not w.models.cancel_button.isEnabled()
    w.tabs.setCurrentWidget(w.chat)
    assert ask(qtbot, w, "Hello!", max_tokens=5)["completion_tokens"] == 5
