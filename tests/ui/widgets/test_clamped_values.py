"""Settings clamp a bad typed value visibly, with a sentence (#49.15): "-5" attention sinks became 5 and 999 CPU
threads became "Auto", silently."""

from __future__ import annotations

from PySide6.QtCore import Qt


def type_into(qtbot, box, text: str) -> None:
    box.setFocus()
    box.lineEdit().selectAll()
    qtbot.keyClicks(box, text)
    qtbot.keyClick(box, Qt.Key_Return)


def test_out_of_range_typing_is_clamped_and_said(qtbot, idle_window):
    w = idle_window
    w.tabs.setCurrentWidget(w.models)
    settings = w.models.load_settings
    with qtbot.waitSignal(settings.sinks.clamped, timeout=2_000) as said:
        type_into(qtbot, settings.sinks, "-5")
    assert settings.sinks.value() == 0
    assert said.args[0] == "Attention sinks cannot be below 0; -5 was set to 0."
    assert w.statusBar().currentMessage() == said.args[0]
    top = settings.threads.maximum()
    with qtbot.waitSignal(settings.threads.clamped, timeout=2_000) as said:
        type_into(qtbot, settings.threads, "999")
    assert settings.threads.value() == top  # the most this machine has, not "Auto"
    assert said.args[0] == f"CPU threads cannot be above {top}; 999 was set to {top}."
    # The chat's sampling boxes too; a value in range is taken as typed, with nothing said.
    w.tabs.setCurrentWidget(w.chat)
    temperature = w.chat.sampling.temperature
    with qtbot.waitSignal(temperature.clamped, timeout=2_000) as said:
        type_into(qtbot, temperature, "9")
    assert temperature.value() == temperature.maximum() and said.args[0].startswith("Temperature cannot be above")
    with qtbot.assertNotEmitted(temperature.clamped):
        type_into(qtbot, temperature, "0.5")
    assert temperature.value() == 0.5


def test_the_settings_dialog_says_a_clamped_value_on_a_line_that_stays(qtbot, idle_window):
    """#55 E4: in Settings, -5 sinks became 0 and 999 threads became 2, and the balloon went with the focus."""
    w = idle_window
    dialog = w.open_settings()
    try:
        sinks = dialog.load_defaults.sinks
        with qtbot.waitSignal(sinks.clamped, timeout=2_000):
            type_into(qtbot, sinks, "-5")
        dialog.load_defaults.ctx.setFocus()  # the focus moves on: the sentence stays
        assert not dialog.clamped.isHidden()
        assert dialog.clamped.text() == "Attention sinks cannot be below 0; -5 was set to 0."
    finally:
        dialog.reject()
