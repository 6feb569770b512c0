"""#17 "Habits of the other apps": Enter sends (a setting), a Settings dialog, errors said once and cleared,
the Benchmark tab's explanations, import that confirms and selects, a damaged header named as such."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from tests.ui.conftest import wait_loaded


def test_enter_sends_shift_enter_adds_a_line_and_settings_turn_it_round(qtbot, idle_window, hearth_home):
    from app.ui.settings.store import load_settings

    w = idle_window
    box = w.chat.input
    box.setFocus()
    with qtbot.waitSignal(box.submitted, timeout=1_000):
        qtbot.keyClick(box, Qt.Key_Return)
    box.setPlainText("first line")
    box.moveCursor(QTextCursor.End)
    with qtbot.assertNotEmitted(box.submitted):
        qtbot.keyClick(box, Qt.Key_Return, Qt.ShiftModifier)
    assert box.toPlainText() == "first line\n"
    dialog = w.open_settings()
    dialog.send_key.setCurrentIndex(dialog.send_key.findData(False))
    dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
    dialog.accept()
    try:
        assert load_settings()["enter_sends"] is False and load_settings()["theme"] == "dark"
        assert "Ctrl+Enter sends" in box.placeholderText()
        with qtbot.assertNotEmitted(box.submitted):
            qtbot.keyClick(box, Qt.Key_Return)
        assert box.toPlainText() == "first line\n\n"  # (Ctrl+Enter still sends: the window's shortcut)
    finally:
        w.apply_settings({"theme": "system", "enter_sends": True})


def test_default_load_options_are_set_one_by_one_in_settings_and_used_for_a_model_not_loaded_before(
        qtbot, hearth_home, bundled_model, model_variant):
    """Settings > Default load options: each option on its own, a button back to Hearth's default beside
    each, kept in the settings file; the Models page shows them for a model never loaded, while a model
    that was loaded keeps what it was loaded with."""
    import json

    from app.core import paths
    from app.ui.settings.store import load_settings
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    q8 = str(model_variant("Q8_0"))
    paths.settings_file().parent.mkdir(parents=True, exist_ok=True)
    paths.settings_file().write_text(json.dumps({
        "imported_models": [q8],
        # The bundled model was loaded before, with a 2,048-token context.
        "model_load_options": {str(bundled_model): {"model_path": str(bundled_model), "n_ctx": 2048}}}))
    make_app([])
    w = MainWindow(load_on_start=False)
    qtbot.addWidget(w)
    w.show()
    try:
        dialog = w.open_settings()
        defaults = dialog.load_defaults
        buttons = defaults.reset_buttons
        assert not any(b.isEnabled() for b in buttons.values())  # all at Hearth's defaults
        defaults.ctx.setCurrentIndex(defaults.ctx.findData(8192))
        defaults.kv_type.setCurrentText("q8_0")
        defaults.flash.setCurrentText("on")
        defaults.spec_mode.setCurrentIndex(2)  # prompt lookup
        defaults.threads.setValue(1)
        assert [names for names, b in buttons.items() if b.isEnabled()] == [
            ("n_threads",), ("n_ctx",), ("kv_type",), ("flash_attn",), ("lookup", "draft_model")]
        qtbot.mouseClick(buttons[("n_ctx",)], Qt.LeftButton)  # this one back to Hearth's 4,096
        assert defaults.ctx.currentData() == 4096 and not buttons[("n_ctx",)].isEnabled()
        assert defaults.kv_type.currentText() == "q8_0"  # the others stay
        dialog.accept()
        assert load_settings()["load_defaults"] == {"flash_attn": "on", "kv_type": "q8_0", "lookup": True,
                                                    "n_threads": 1}
        pane = w.models.load_settings
        w.tabs.setCurrentWidget(w.models)
        qtbot.waitUntil(lambda: len(w.models.models) >= 2, timeout=10_000)
        rows = [m["path"] for m in w.models.models]
        w.models.table.selectRow(rows.index(q8))  # never loaded: the defaults
        assert (pane.kv_type.currentText(), pane.flash.currentText(), pane.spec_mode.currentIndex(),
                pane.threads.value(), pane.ctx.currentData()) == ("q8_0", "on", 2, 1, 4096)
        pane.ctx.setCurrentIndex(pane.ctx.findData(1024))  # changed here, not loaded yet
        w.models.table.selectRow(rows.index(str(bundled_model)))  # loaded before: its own options
        assert (pane.ctx.currentData(), pane.kv_type.currentText()) == (2048, "f16")
        w.models.table.selectRow(rows.index(q8))  # the change made for it is still there
        assert pane.ctx.currentData() == 1024
        # The chat's model picker loads a model with that model's options, not the pane's.
        assert w.models.options_for(str(bundled_model)).n_ctx == 2048
        assert w.models.options_for(q8).n_ctx == 1024
        # Every load setting explains itself.
        from PySide6.QtWidgets import QAbstractButton, QComboBox, QSlider, QSpinBox

        controls = [c for kind in (QComboBox, QSpinBox, QSlider, QAbstractButton) for c in pane.findChildren(kind)]
        assert len(controls) >= 12
        for control in controls:
            assert control.toolTip(), type(control).__name__
    finally:
        w.close()


def test_the_first_start_loads_the_bundled_model_with_the_default_load_options(qtbot, hearth_home):
    import json

    from app.core import paths
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    paths.settings_file().parent.mkdir(parents=True, exist_ok=True)
    paths.settings_file().write_text(json.dumps({"load_defaults": {"n_ctx": 2048, "kv_type": "q8_0"}}))
    make_app([])
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    try:
        wait_loaded(qtbot, w)
        assert (w.bridge.info["n_ctx"], w.bridge.options.kv_type) == (2048, "q8_0")
        assert w.ctx_label.text() == "context 2048"
    finally:
        w.close()


def test_a_message_leaves_the_model_in_view_and_a_search_error_is_said_once(qtbot, idle_window, monkeypatch):
    w = idle_window
    w.model_label.setText("some model")
    w.show_message("Something to read.")
    assert w.statusBar().currentMessage() == "Something to read." and w.model_label.isVisible()
    w.statusBar().clearMessage()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: what offline looks like
    hub = w.models.hub
    w.tabs.setCurrentWidget(w.models)
    w.models.sources.setCurrentWidget(hub)
    hub.query.setText("qwen")
    before = hub.note.text()
    qtbot.mouseClick(hub.search_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: hub.note.text() not in (before, "Searching for “qwen”…"), timeout=30_000)
    error = hub.note.text()
    assert error and "Traceback" not in error
    assert error not in w.models.status.text() and w.statusBar().currentMessage() == ""


def test_the_benchmark_tab_says_what_a_run_takes_and_shows_an_empty_state(qtbot, idle_window):
    w = idle_window
    bench = w.bench
    w.tabs.setCurrentWidget(bench)
    assert bench.pages.currentWidget() is bench.empty and "No result yet" in bench.empty.text()
    assert "A run takes about 2 minutes" in bench.caption.text()  # 3 repeats of the bundled model
    assert "adds the F16, Q8_0 and Q4_K_M copies" in bench.caption.text()
    bench.quick.setChecked(True)
    bench.repeats.setValue(1)
    assert "under a minute" in bench.caption.text()


def test_import_says_so_and_selects_the_model_and_a_damaged_header_is_named_so(qtbot, idle_window, model_variant,
                                                                             tmp_path):
    import struct

    w = idle_window
    q8 = str(model_variant("Q8_0"))
    w.tabs.setCurrentWidget(w.models)
    w.models.import_file(q8)
    qtbot.waitUntil(lambda: w.models.selected_path() == q8, timeout=10_000)
    assert "Imported smollm2-135m-Q8_0.gguf; it is selected" in w.models.status.text()
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(b"GGUF" + b"\x1c\x1c\x00-" + struct.pack("<QQ", 0, 0) + b"\0" * 64)
    with qtbot.waitSignal(w.models.noticed, timeout=10_000) as said:
        w.models.import_file(str(damaged))
    said = said.args[0].text
    assert "damaged.gguf is a damaged file" in said and "GGUF version 754981916" not in said
    assert "damaged file" in w.models.status.text()
