"""The Server page offers the user's MCP servers to API clients only when asked (#45): off by default; ticked, the
servers chosen are started with the API (as `hearth serve --tools`) and end with it; the choice is kept."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtCore import Qt

from app.tools.server_entry import ServerEntry
from tests.server.conftest import free_port
from tests.helpers.heartbeat import Heartbeat
from tests.ui.connections.test_server_page import press

pytestmark = pytest.mark.skipif(shutil.which("mcp-server-time") is None, reason="mcp-server-time is not installed")


def test_mcp_servers_are_offered_to_api_clients_only_when_ticked(qtbot, idle_window):
    from app.tools.servers import save_server

    save_server(ServerEntry("time", command="mcp-server-time", args=["--local-timezone", "UTC"]))
    save_server(ServerEntry("other", command="mcp-server-time"))
    w = idle_window
    page = w.server
    w.tabs.setCurrentWidget(page)  # shown: the list reads mcp.json again
    names = [page.tool_servers.item(i).text() for i in range(page.tool_servers.count())]
    assert names == ["other", "time"]
    assert not page.offer_tools.isChecked() and not page.tool_servers.isEnabled()  # off by default
    page.port.setValue(free_port())
    press(qtbot, page, page.start_button)
    assert page.server.running and page.server.api_tools is None and page.serve_options().tools == []
    press(qtbot, page, page.stop_button)

    page.offer_tools.setChecked(True)
    assert page.tool_servers.isEnabled()
    page.tool_servers.item(1).setCheckState(Qt.Checked)  # "time" only
    press(qtbot, page, page.start_button)
    try:
        assert page.server.running and page.server.api_tools.labels == ["time"]
        assert "API clients may use the MCP servers time in Responses (only" in page.status.text()
        assert not page.server.api_tools.in_chat  # chat completions only where asked for too
        assert not page.offer_tools.isEnabled() and not page.tool_servers.isEnabled()  # fixed while serving
        assert not page.tools_in_chat.isEnabled()
    finally:
        press(qtbot, page, page.stop_button)
    assert page.server.api_tools is None
    assert w.settings["server"]["offer_tools"] is True and w.settings["server"]["tools"] == ["time"]
    page.tools_in_chat.setChecked(True)
    press(qtbot, page, page.start_button)
    try:
        assert page.server.api_tools.in_chat and "in Responses and chat completions" in page.status.text()
    finally:
        press(qtbot, page, page.stop_button)
    assert w.settings["server"]["tools_in_chat"] is True


def test_a_slow_mcp_server_never_holds_the_window_while_the_api_starts(qtbot, idle_window):
    """Starting the API opens the MCP servers offered first, each up to its connect timeout: on the window's own
    thread, a slow one held every click and repaint that long. Now the page says it is starting and the window
    goes on; the server serves once they are up."""
    from app.tools.servers import save_server

    slow_s = 3
    save_server(ServerEntry("slow", command="sh", args=["-c", f"sleep {slow_s}; exec mcp-server-time"]))
    w = idle_window
    page = w.server
    w.tabs.setCurrentWidget(page)
    page.offer_tools.setChecked(True)
    page.tool_servers.item(0).setCheckState(Qt.Checked)
    page.port.setValue(free_port())
    beat = Heartbeat().start()
    with qtbot.waitSignal(page.serving_changed, timeout=60_000):
        page.start_button.click()
        # The click came back before the MCP server could answer: the page says what it waits for.
        assert page.changing == "start" and not page.server.running
        assert page.start_button.text() == "Starting…" and not page.start_button.isEnabled()
        assert not page.stop_button.isEnabled() and page.status.text().startswith("Starting the MCP servers")
    beat.stop()
    try:
        assert page.server.running and page.server.api_tools.labels == ["slow"]
        # The window's timer kept beating through the wait: no gap near the server's 3 s (the start's imports on
        # the worker's thread share the interpreter, which can delay a beat by tens of milliseconds).
        assert sum(beat.gaps) >= slow_s * 1000 * 0.9 and max(beat.gaps) < 1000, beat.summary()
    finally:
        press(qtbot, page, page.stop_button)
    assert not page.server.running and page.status.text() == "Stopped."
