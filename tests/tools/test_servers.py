"""mcp.json as the user edits it, copies it from another app, and breaks it: one sentence, never a traceback,
and never a file written back without the keys another app put there."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from app.core import paths
from app.tools.servers import ToolsConfigError, allow_always, allowed_tools, load_servers

CLAUDE_DESKTOP = {"mcpServers": {
    "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=UTC"], "env": {"TZ": "UTC"}},
    "remote": {"type": "streamable-http", "url": "https://example.com/mcp", "headers": {"X-Key": "k"},
               "alwaysAllow": ["search"]}},  # a key Hearth does not use (Cline's), kept as it is
    "globalShortcut": "Ctrl+Space"}


def test_another_apps_file_is_imported_and_its_own_keys_survive_hearth_writing_it(tmp_path, capsys):
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps(CLAUDE_DESKTOP))
    assert main(["tools", "import", str(source)]) == 0
    assert "run as you" in capsys.readouterr().out
    servers = load_servers()
    assert servers["time"].command == "uvx" and servers["time"].env == {"TZ": "UTC"}
    assert servers["remote"].transport == "http" and servers["remote"].headers == {"X-Key": "k"}
    assert main(["tools", "add", "local", "--", "mcp-server-time"]) == 0
    written = json.loads(paths.mcp_config_file().read_text())["mcpServers"]
    assert written["remote"]["alwaysAllow"] == ["search"] and set(written) == {"time", "remote", "local"}


def test_removing_a_server_forgets_the_tools_allowed_for_it(capsys):
    assert main(["tools", "add", "clock", "--", "mcp-server-time"]) == 0
    allow_always("clock", "get_current_time")
    assert allowed_tools("clock") == {"get_current_time"}
    assert main(["tools", "rm", "clock"]) == 0
    assert allowed_tools("clock") == set() and "clock" not in load_servers()


@pytest.mark.parametrize("text, words", [
    ('{"mcpServers": {', "is not valid JSON"),
    ('{"mcpServers": []}', 'must be an object with "mcpServers"'),
    ('{"mcpServers": {"x": {"args": ["a"]}}}', "neither a 'command'"),
    ('{"mcpServers": {"x": {"url": "https://h/sse", "type": "sse"}}}', "old SSE transport"),
])
def test_a_broken_file_is_one_sentence(text, words, capsys):
    paths.mcp_config_file().write_text(text)
    with pytest.raises(ToolsConfigError, match=words):
        load_servers()
    assert main(["tools", "list"]) == 1
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and err.count("\n") == 1


def test_a_missing_program_is_one_sentence(capsys):
    assert main(["tools", "add", "gone", "--", "no-such-mcp-server-here"]) == 0
    assert "no program 'no-such-mcp-server-here' on PATH" in capsys.readouterr().err
    assert main(["tools", "test", "gone"]) == 1
    err = capsys.readouterr().err
    assert "there is no program 'no-such-mcp-server-here'" in err and "Traceback" not in err


def _tools_test(capsys, name: str, mode: str) -> tuple[float, str]:
    """`hearth tools test` on the misbehaving server started with `mode`: its seconds and what it printed."""
    import sys
    import time

    from tests.helpers.paths import MISBEHAVING_MCP

    assert main(["tools", "add", name, "--", sys.executable, str(MISBEHAVING_MCP), mode]) == 0
    capsys.readouterr()
    started = time.monotonic()
    assert main(["tools", "test", name]) == 1
    return time.monotonic() - started, capsys.readouterr().err


def test_a_server_that_answers_with_what_is_not_mcp_is_one_sentence_within_seconds(capsys):
    """#56 E19: a server answering `initialize` with a line that is not JSON: `hearth tools test` printed the MCP SDK's
    whole traceback, then waited its 30 s. Now one sentence, in a few seconds."""
    seconds, err = _tools_test(capsys, "garbled", "--not-mcp")
    assert seconds < 10, seconds
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "MCP server 'garbled'" in err and "not an MCP message ('this is not an MCP message')" in err


def test_a_server_that_answers_with_broken_json_is_said_at_once(capsys, monkeypatch):
    """#56 E19: a server answering `initialize` with a line of broken JSON waited out the grace a banner line gets
    (a line before the real answer) before `hearth tools test` said so. Broken JSON was the answer: it is said at
    once (the grace is made 30 s here, so that only a start that skips it passes)."""
    from app.tools import mcp_client

    monkeypatch.setattr(mcp_client, "NOT_MCP_GRACE_S", 30.0)
    seconds, err = _tools_test(capsys, "broken", "--broken-json")
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "MCP server 'broken'" in err and """not an MCP message ('{"jsonrpc": "2.0", "id": 0""" in err, err
    assert seconds < 10, seconds
