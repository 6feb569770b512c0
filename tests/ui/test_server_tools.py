"""The Server page offers the user's MCP servers to API clients only when asked (#45): off by default; ticked, the
servers chosen are started with the API (as `hearth serve --tools`) and end with it; the choice is kept."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtCore import Qt

from app.tools.server_entry import ServerEntry
from tests.server.conftest import free_port

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
    page.start()
    assert page.server.running and page.server.api_tools is None and page.serve_options().tools == []
    page.stop()

    page.offer_tools.setChecked(True)
    assert page.tool_servers.isEnabled()
    page.tool_servers.item(1).setCheckState(Qt.Checked)  # "time" only
    page.start()
    try:
        assert page.server.running and page.server.api_tools.labels == ["time"]
        assert "API clients may use the MCP servers time" in page.status.text()
        assert not page.offer_tools.isEnabled() and not page.tool_servers.isEnabled()  # fixed while serving
    finally:
        page.stop()
    assert page.server.api_tools is None
    assert w.settings["server"]["offer_tools"] is True and w.settings["server"]["tools"] == ["time"]
