"""#17 "Habits of the other apps": Enter sends (a setting), a Settings dialog, errors said once and cleared,
the Benchmark tab's explanations, import that confirms and selects, a damaged header named as such."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor


def test_enter_sends_shift_enter_adds_a_line_and_settings_turn_it_round_and_reset_load_options(qtbot, idle_window, hearth_home):
    from app.core.settings import load_settings

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
    load = w.models.load_settings
    load.ctx.setCurrentIndex(load.ctx.findData(16384))
    load.kv_type.setCurrentText("q8_0")
    dialog = w.open_settings()
    qtbot.mouseClick(dialog.reset_button, Qt.LeftButton)  # the load settings back to Hearth's defaults
    dialog.send_key.setCurrentIndex(dialog.send_key.findData(False))
    dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
    dialog.accept()
    try:
        assert load_settings()["enter_sends"] is False and load_settings()["theme"] == "dark"
        from app.engine.protocol import LoadOptions

        defaults = LoadOptions()
        assert (load.ctx.currentData(), load.kv_type.currentText()) == (defaults.n_ctx, defaults.kv_type)
        assert "Ctrl+Enter sends" in box.placeholderText()
        with qtbot.assertNotEmitted(box.submitted):
            qtbot.keyClick(box, Qt.Key_Return)
        assert box.toPlainText() == "first line\n\n"  # (Ctrl+Enter still sends: the window's shortcut)
    finally:
        w.apply_settings({"theme": "system", "enter_sends": True})


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
    with qtbot.waitSignal(w.models.error_reported, timeout=10_000) as said:
        w.models.import_file(str(damaged))
    assert "damaged.gguf is a damaged file" in said.args[0] and "GGUF version 754981916" not in said.args[0]
    assert "damaged file" in w.models.status.text()
