"""The real main window on the offscreen platform, with a real engine process."""

from __future__ import annotations

import threading

import pytest

READY_TIMEOUT_MS = 60_000


@pytest.fixture
def main_window(qtbot, hearth_home):
    from app.ui.app import make_app
    from app.ui.main_window import MainWindow

    make_app([])
    threads_before = set(threading.enumerate())
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.bridge.ready, timeout=READY_TIMEOUT_MS)
    yield window
    window.close()
    # No worker or engine-reader thread outlives the window.
    left = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    assert not left, f"threads left running: {[t.name for t in left]}"


@pytest.fixture
def idle_window(qtbot, hearth_home):
    """The real main window without a model loaded (no engine): for pages that do not chat."""
    from app.ui.app import make_app
    from app.ui.main_window import MainWindow

    make_app([])
    threads_before = set(threading.enumerate())
    window = MainWindow(load_on_start=False)
    qtbot.addWidget(window)
    window.show()
    yield window
    window.close()
    # The test's own Hub server keeps its connection threads; the app must leave none of its own.
    left = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()
            and "process_request" not in t.name]
    assert not left, f"threads left running: {[t.name for t in left]}"


@pytest.fixture
def hub_server(monkeypatch):
    """A local Hub-shaped server that the app's hub code talks to (HF_ENDPOINT)."""
    from tests.ui.hub_fixtures import gui_hub

    server = gui_hub().start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    yield server
    server.stop()


def ask(qtbot, window, text: str, max_tokens: int = 24, temperature: float = 0.0, wait: bool = True):
    """Type a message and send it as a user would; wait for the answer unless told not to."""
    window.chat.sampling.temperature.setValue(temperature)
    window.chat.sampling.max_tokens.setValue(max_tokens)
    window.chat.input.setPlainText(text)
    if wait:
        with qtbot.waitSignal(window.bridge.generation_finished, timeout=60_000) as finished:
            window.chat.send_button.click()
        return finished.args[0]
    window.chat.send_button.click()
    return None
