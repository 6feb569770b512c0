"""#17 "Always clear what runs": a failed load stays said where the user acted and marks the file, the
window names models as the library does (with their type) and marks the loaded one, and the chat page has
a model picker with Load and Eject."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.helpers.tiny_gguf import write_unknown_arch
from tests.ui.conftest import shot
from tests.ui.bridge.test_load_states import select_in_library

LOAD_TIMEOUT_MS = 60_000
BUNDLED_TITLE = "SmolLM2-135M-Instruct (Q4_1, bundled)"


def library_row(w, path) -> list[str]:
    paths = [m["path"] for m in w.models.models]
    row = paths.index(str(path))
    return [w.models.table.item(row, col).text() for col in range(w.models.table.columnCount())]


def test_a_failed_load_stays_said_marks_the_file_and_names_the_model_still_loaded(qtbot, main_window, tmp_path,
                                                                                  bundled_model):
    w = main_window
    assert w.model_label.text() == BUNDLED_TITLE  # the library's name, not GGUF general.name
    # A file whose header reads well (so the library takes it) but which llama.cpp refuses.
    bad = write_unknown_arch(tmp_path / "broken-Q4_1.gguf")
    select_in_library(qtbot, w, bad)
    with qtbot.waitSignal(w.bridge.load_failed, timeout=LOAD_TIMEOUT_MS) as failed:
        qtbot.mouseClick(w.models.load_button, Qt.LeftButton)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS):
        pass  # the model before comes back
    qtbot.wait(100)
    status = w.models.status.text()
    assert "broken-Q4_1.gguf" in status and failed.args[0].split(".")[0] in status
    assert f"{BUNDLED_TITLE} is loaded" in status
    assert w.model_label.text() == BUNDLED_TITLE
    assert "failed to load" in library_row(w, bad)[0]
    assert "loaded" in library_row(w, bundled_model)[0]
    qtbot.waitUntil(lambda: "did not load" in w.models.fit_label.text(), timeout=5_000)
    assert "Fits" not in w.models.fit_label.text()


def test_the_chat_page_picks_loads_and_ejects_a_model(qtbot, main_window, model_variant, tmp_path):
    w = main_window
    picker = w.chat.picker
    q8 = str(model_variant("Q8_0"))
    w.models.import_file(q8)
    qtbot.waitUntil(lambda: picker.combo.findData(q8) >= 0, timeout=10_000)
    assert picker.combo.currentText() == BUNDLED_TITLE and not picker.load_button.isEnabled()
    picker.combo.setCurrentIndex(picker.combo.findData(q8))
    assert picker.combo.currentText() == "smollm2-135m-Q8_0.gguf"  # its type is in its name already
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS) as loaded:
        qtbot.mouseClick(picker.load_button, Qt.LeftButton)
    assert loaded.args[0]["path"] == q8 and w.model_label.text() == "smollm2-135m-Q8_0.gguf"
    assert "loaded" in library_row(w, q8)[0] and "loaded" not in library_row(w, w.models.models[0]["path"])[0]
    w.resize(1024, 700)  # the smallest screen: the state "no model loaded" must not widen the page (#31.7)
    qtbot.waitUntil(lambda: w.width() == 1024, timeout=2_000)
    page_minimum = w.chat.minimumSizeHint().width()
    qtbot.mouseClick(picker.eject_button, Qt.LeftButton)
    assert not w.bridge.ready and w.state_label.text() == "No model loaded"
    qtbot.wait(50)  # the layout's turn
    assert w.chat.minimumSizeHint().width() <= page_minimum and w.width() == 1024
    assert w.monitor_dock.width() >= 240 and w.monitor_dock.geometry().right() < w.width()
    shot(w, "chat-ejected-1024", tmp_path)
    assert not w.chat.send_button.isEnabled() and "No model is loaded" in w.chat.hint.text()
    assert picker.state.text() == "no model loaded" and picker.load_button.isEnabled()
    assert not any("loaded" in library_row(w, m["path"])[0] for m in w.models.models)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS):
        qtbot.mouseClick(picker.load_button, Qt.LeftButton)
    assert w.bridge.ready and w.bridge.info["path"] == q8


def test_a_local_model_is_named_by_its_file_and_general_name_stays_in_the_details(qtbot, main_window,
                                                                                  bundled_model):
    """#29: general.name ("Smollm2 135M 8k Lc100K Mix1 Ep2", the same for every copy) names no label."""
    from app.ui.models.titles import model_title

    w = main_window
    general = "Smollm2 135M 8k Lc100K Mix1 Ep2"
    assert w.bridge.info["name"] == general  # what the file says
    assert model_title(w.bridge.info) == BUNDLED_TITLE
    assert model_title({"path": "/models/smollm2-135m-Q4_0.gguf", "name": general}) == "smollm2-135m-Q4_0.gguf"
    assert model_title({"remote": True, "path": "http://x/v1", "name": "qwen2.5-7b"}) == "qwen2.5-7b"
    qtbot.waitUntil(lambda: w.pages.all_built(), timeout=30_000)
    assert w.connections.current.text() == f"The window chats with {BUNDLED_TITLE} on this computer."
    for text in (w.model_label.text(), w.chat.picker.combo.currentText(), w.bench.model_label.text()):
        assert general not in text
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: "Internal name" in w.models.details.text(), timeout=10_000)
    assert w.models.details.text().startswith(f"<b>{BUNDLED_TITLE}</b>") and general in w.models.details.text()
