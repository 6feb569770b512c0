"""Secrets in a server's env or headers go to the keyring, mcp.json keeps a reference, and the server still gets
the value when it starts; a literal from another app's file still works, and without a keyring the value stays
in mcp.json with one sentence saying so."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import keyring
import pytest
from keyring.backends import fail

from app.cli import main
from app.core import paths
from app.tools.mcp_client import McpConnection
from app.tools.server_secrets import SERVICE, keep_secrets, resolved
from app.tools.servers import ServerEntry, ToolsConfigError, get_server, remove_server, save_server
from tests.ui.conftest import memory_keyring  # noqa: F401 (autouse: an empty keyring in memory for each test)

MISBEHAVING = Path(__file__).with_name("misbehaving_server.py")


def test_a_servers_api_key_goes_to_the_keyring_and_reaches_the_server_when_it_starts(memory_keyring, capsys):
    ring = memory_keyring
    assert main(["tools", "add", "--env", "SERVICE_API_KEY=sk-live-123", "--env", "REGION=eu", "flaky", "--",
                 sys.executable, str(MISBEHAVING)]) == 0
    written = json.loads(paths.mcp_config_file().read_text())["mcpServers"]["flaky"]["env"]
    assert written == {"SERVICE_API_KEY": "${keyring:flaky/env/SERVICE_API_KEY}", "REGION": "eu"}
    assert "sk-live-123" not in paths.mcp_config_file().read_text()
    assert ring.saved[(SERVICE, "flaky/env/SERVICE_API_KEY")] == "sk-live-123"
    with McpConnection(get_server("flaky")) as conn:
        assert conn.call("env", {"name": "SERVICE_API_KEY"}, timeout=30).text == "sk-live-123"
        assert conn.call("env", {"name": "REGION"}, timeout=30).text == "eu"
    remove_server("flaky")  # its secret goes with it
    assert (SERVICE, "flaky/env/SERVICE_API_KEY") not in ring.saved


def test_an_authorization_header_is_kept_in_the_keyring_and_a_literal_from_another_app_still_works(memory_keyring,
                                                                                                    monkeypatch):
    ring = memory_keyring
    entry, notes = keep_secrets(ServerEntry("docs", url="https://example.com/mcp",
                                            headers={"Authorization": "Bearer t0k", "Accept-Language": "fr"}))
    assert notes == [] and entry.headers == {"Authorization": "${keyring:docs/headers/Authorization}",
                                             "Accept-Language": "fr"}
    save_server(entry)
    assert resolved(get_server("docs")).headers == {"Authorization": "Bearer t0k", "Accept-Language": "fr"}
    literal = ServerEntry("copied", url="https://example.com/mcp", headers={"Authorization": "Bearer plain"})
    assert resolved(literal) == literal  # as Claude Desktop's file has it
    # Another process (a fresh session's keys) whose keyring lost it, a wiped keyring: one sentence, no traceback.
    from app.core.api_keys import KeyStore
    from app.tools import server_secrets

    monkeypatch.setattr(server_secrets, "_keys", KeyStore(SERVICE))
    ring.saved.clear()
    with pytest.raises(ToolsConfigError, match="the keyring does not have it; add the server again"):
        resolved(get_server("docs"))


def test_without_a_keyring_the_secret_stays_in_mcp_json_and_the_user_is_told(capsys):
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        assert main(["tools", "add", "--env", "GITHUB_TOKEN=ghp_x", "clock", "--", "mcp-server-time"]) == 0
    finally:
        keyring.set_keyring(before)
    assert json.loads(paths.mcp_config_file().read_text())["mcpServers"]["clock"]["env"] == {"GITHUB_TOKEN": "ghp_x"}
    said = capsys.readouterr().err
    assert "GITHUB_TOKEN: No keyring service is running" in said and "stays in mcp.json as written" in said
