"""The window's settings follow every store's rule (app/core/store/jsonstore.py): saved when they change, only what
changed, and a save that fails is said."""

from __future__ import annotations

import json

from tests.ui.conftest import READY_TIMEOUT_MS
from tests.helpers.paths import REPO


def _on_disk() -> dict:
    from app.core import paths

    return json.loads(paths.settings_file().read_text(encoding="utf-8"))


def test_the_options_of_a_successful_load_are_on_disk_at_once(qtbot, main_window, bundled_model):
    """#49 item 5: a load at context 2048, then a kill -9, came back at 512: the options were saved only at
    Settings > OK or a clean exit. The file is read as a restarted window reads it, with this one still open."""
    from app.ui.settings.store import load_settings
    from app.protocol.messages import LoadOptions

    w = main_window
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=READY_TIMEOUT_MS):
        w.load_model(LoadOptions(model_path=str(bundled_model), n_ctx=2048))
    qtbot.waitUntil(lambda: _on_disk().get("load_options", {}).get("n_ctx") == 2048, timeout=5000)
    restarted = load_settings()
    assert restarted["load_options"]["model_path"] == str(bundled_model)
    assert restarted["model_load_options"][str(bundled_model)]["n_ctx"] == 2048


def test_the_window_does_not_write_its_start_up_copy_over_another_process(qtbot, hearth_home):
    """#48 C13: the window wrote its whole start-up copy at exit, undoing what another process had changed."""
    import subprocess
    import sys

    from app.ui.settings.store import update_settings
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    update_settings(theme="light", enter_sends=True)
    make_app([])
    window = MainWindow(load_on_start=False)
    qtbot.addWidget(window)
    window.show()
    other = "from app.ui.settings.store import update_settings; update_settings(theme='dark', enter_sends=False)"
    subprocess.run([sys.executable, "-c", other], check=True, timeout=60,
                   env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    window.chat.input.set_enter_sends(True)
    window.close()
    data = _on_disk()
    assert data["theme"] == "dark" and data["enter_sends"] is False  # the other process's changes stand
    assert "window_geometry" in data and "sampling" in data  # and the window's own are there


def test_a_settings_save_that_fails_is_said(qtbot, hearth_home):
    from app.core import paths
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    make_app([])
    window = MainWindow(load_on_start=False)
    qtbot.addWidget(window)
    window.show()
    try:
        paths.settings_file().unlink(missing_ok=True)
        paths.settings_file().mkdir(parents=True)  # what a write then meets: not a file it can replace
        window.settings["theme"] = "dark"
        window.save_state()
        message = window.statusBar().currentMessage()
        assert message.startswith("Settings were not saved: settings.json could not be saved in"), message
    finally:
        window.close()
