"""#31, notifications: a long job (here a real quantize) that ends while the window is not active is told on the
desktop; while the user looks at the window, nothing pops up. Offscreen there is no system tray: the window asks
for attention instead, and nothing fails."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QSystemTrayIcon, QWidget

from app.core.library.bundled import bundled_model_path

JOB_TIMEOUT_MS = 60_000


def test_a_job_that_ends_while_the_window_is_not_active_is_told_on_the_desktop(qtbot, idle_window):
    w = idle_window
    assert not QSystemTrayIcon.isSystemTrayAvailable()  # offscreen: the case that must not fail
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: str(bundled_model_path()) in [m.get("path") for m in w.models.models], timeout=20_000)
    w.models.table.selectRow([m.get("path") for m in w.models.models].index(str(bundled_model_path())))
    w.models.quant_type.setCurrentIndex(w.models.quant_type.findData("Q4_0"))
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=2_000)
    with qtbot.waitSignal(w.models.jobs.job_finished, timeout=JOB_TIMEOUT_MS) as finished:
        w.models.quantize_button.click()
        with qtbot.waitSignal(w.models.jobs.job_failed, timeout=1_000):
            w.models.quantize_button.click()  # a second one is refused, said on the page the user looks at
        assert w.notifier.sent == []
        elsewhere = QWidget()  # then another window takes the focus, as the user's browser would
        qtbot.addWidget(elsewhere)
        elsewhere.show()
        elsewhere.activateWindow()
        qtbot.waitUntil(lambda: not w.isActiveWindow(), timeout=2_000)
    made = finished.args[1]
    assert Path(made).name.endswith("Q4_0.gguf")
    assert w.notifier.sent == [("Quantize finished", f"Quantized {Path(made).name}; it is in the library.",
                                "alert")]
    assert w.notifier.tray is None
