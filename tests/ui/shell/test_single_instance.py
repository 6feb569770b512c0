"""One window per data folder (#18 item 11): a second start hands over to the first and exits."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_second_start_brings_the_first_window_forward_and_exits(qtbot, hearth_home):
    from app.ui.shell.app import make_app
    from app.ui.shell.single_instance import InstanceServer

    make_app([])
    first = InstanceServer()
    try:
        with qtbot.waitSignal(first.raise_requested, timeout=30_000):
            second = subprocess.Popen([sys.executable, "-m", "app", "gui"], env={**os.environ},
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # The signal comes through the event loop that waitSignal runs while we wait here.
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        assert "Hearth is already open" in err
    finally:
        first.close()


def test_a_socket_left_by_a_crashed_window_does_not_block_the_next_start(qtbot, hearth_home):
    from PySide6.QtNetwork import QLocalServer

    from app.ui.shell.app import make_app
    from app.ui.shell.single_instance import InstanceServer, hand_over_to_running, server_name

    make_app([])
    stale = QLocalServer()
    assert stale.listen(server_name())
    stale.close()  # on Unix a crash can leave the socket file behind; nobody answers on it
    assert not hand_over_to_running()
    fresh = InstanceServer()
    try:
        assert fresh.server.isListening()
    finally:
        fresh.close()
