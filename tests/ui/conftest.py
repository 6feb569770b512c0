"""The real main window on the offscreen platform, with a real engine process."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend

READY_TIMEOUT_MS = 60_000


def chosen_mode(mode: str = "full") -> None:
    """The window mode the user chose (app/ui/shell/window_mode.py). The window tests drive every control, so they run
    the full window; tests/ui/shell/test_simple_window.py meets the simple one a first start shows."""
    from app.ui.settings.store import update_settings

    update_settings(window_mode=mode)


@contextmanager
def opened_window(qtbot, load: bool = True, mode: str | None = "full", foreign_threads: str = ""):
    """The real main window, shown (and, with load, its model loaded and said); closed after, and no worker or
    engine-reader thread of its own may outlive it. mode None: the first start's, as nothing was chosen yet;
    foreign_threads: a name part of threads the test's own servers keep (a Hub server's connections)."""
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    if mode is not None:
        chosen_mode(mode)
    make_app([])
    threads_before = set(threading.enumerate())
    window = MainWindow(load_on_start=load)
    qtbot.addWidget(window)
    window.show()
    if load:
        wait_loaded(qtbot, window)
    yield window
    window.close()
    left = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()
            and not (foreign_threads and foreign_threads in t.name)]
    assert not left, f"threads left running: {[t.name for t in left]}"


@contextmanager
def reopened_window(qtbot):
    """The window as the next start opens it (no model loaded): what a crash left, recovered."""
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    make_app([])
    window = MainWindow(load_on_start=False)
    qtbot.addWidget(window)
    window.show()
    try:
        yield window
    finally:
        window.close()


@pytest.fixture
def main_window(qtbot, hearth_home):
    with opened_window(qtbot) as window:
        yield window


def loaded_and_said(window) -> bool:
    """The model is loaded and the window has said so ("Ready" in the status bar). The supervisor's ready is
    set on its own thread, and the pages hear of it by the queued model_loaded that follows: a test that read a
    page in between found it without a model (the monitor's draft title, twice in one CI run)."""
    return window.bridge.ready and window.status.state.text().startswith("Ready")


def wait_loaded(qtbot, window, timeout: int = READY_TIMEOUT_MS) -> None:
    qtbot.waitUntil(lambda: loaded_and_said(window), timeout=timeout)


@pytest.fixture
def idle_window(qtbot, hearth_home):
    """The real main window without a model loaded (no engine): for pages that do not chat."""
    with opened_window(qtbot, load=False, foreign_threads="process_request") as window:
        yield window


@pytest.fixture
def hub_server(monkeypatch):
    """A local Hub-shaped server that the app's hub code talks to (HF_ENDPOINT)."""
    from tests.helpers.hub_fixtures import gui_hub

    server = gui_hub().start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    yield server
    server.stop()


def ask(qtbot, window, text: str, max_tokens: int = 24, temperature: float = 0.0, wait: bool = True):
    """Type a message and send it as a user would; wait for the answer unless told not to."""
    window.chat.sampling.temperature.setValue(temperature)
    window.chat.sampling.max_tokens.setValue(max_tokens)
    window.chat.input.setPlainText(text)
    # As a user waits for Send to be there: the load's queued news can still be arriving after "ready".
    qtbot.waitUntil(window.chat.send_button.isEnabled, timeout=30_000)
    if wait:
        with qtbot.waitSignal(window.bridge.generation_finished, timeout=60_000) as finished:
            window.chat.send_button.click()
        return finished.args[0]
    window.chat.send_button.click()
    return None


class MemoryKeyring(KeyringBackend):
    """A keyring in memory: this machine runs no keyring service, and a test must not write a real one."""

    priority = 1

    def __init__(self):
        super().__init__()
        self.saved: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.saved.get((service, username))

    def set_password(self, service, username, password):
        self.saved[(service, username)] = password

    def delete_password(self, service, username):
        self.saved.pop((service, username), None)


@pytest.fixture(autouse=True)
def memory_keyring():
    """Every window test gets an empty keyring of its own: none touches the keyring of the machine."""
    before = keyring.get_keyring()
    ring = MemoryKeyring()
    keyring.set_keyring(ring)
    yield ring
    keyring.set_keyring(before)


def shot(window, name: str, tmp_path: Path) -> Path:
    """The window at 1366x768 as PNG: in HEARTH_SCREENSHOTS when set (for the README), else tmp_path."""
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    assert window.grab().save(str(path))
    return path
