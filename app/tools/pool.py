"""The MCP servers a long-lived client (the window) keeps started between answers.

Starting a server costs a second or more (mcp-server-time: a Python start and its imports), every answer
of a chat with tools would pay it again. A connection is started when an answer first needs it, kept, and
started again when its entry in mcp.json changed or its server died; the window closes them all when it closes.
Used from one worker thread at a time (the window asks one answer at a time); the lock covers the rest.
"""

from __future__ import annotations

import threading

from app.tools.mcp_client import CONNECT_TIMEOUT_S, McpConnection
from app.tools.servers import ToolsConfigError, load_servers


class ServerPool:
    def __init__(self, connect_timeout: float = CONNECT_TIMEOUT_S):
        self.connect_timeout = connect_timeout
        self._open: dict[str, McpConnection] = {}
        self._lock = threading.Lock()

    def tool_set(self, names: list[str], pinned: dict | None = None):
        """The named servers' tools (a ToolSet), each server started if it is not running; ToolsConfigError or
        ToolServerError (one sentence) for one that is not configured or cannot start."""
        from app.tools.tool_chat import ToolSet  # the call grammar's llama.cpp: on the answer's thread, when used

        servers = load_servers()
        missing = [n for n in names if n not in servers]
        if missing:
            raise ToolsConfigError(f"This chat uses MCP server{'s' if len(missing) > 1 else ''} "
                                   f"{', '.join(missing)}, which mcp.json no longer has; turn "
                                   f"{'them' if len(missing) > 1 else 'it'} off in the chat's Tools box.")
        with self._lock:
            for name in names:
                conn = self._open.get(name)
                if conn is not None and (not conn.alive or conn.entry != servers[name]):
                    conn.close()
                    del self._open[name]
                if name not in self._open:
                    self._open[name] = McpConnection(servers[name], self.connect_timeout).open()
            return ToolSet([self._open[n] for n in names], pinned)

    def drop(self, name: str) -> None:
        """A server removed or changed on the Tools page: its process ends now, not at the window's close."""
        with self._lock:
            conn = self._open.pop(name, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        with self._lock:
            conns, self._open = list(self._open.values()), {}
        for conn in conns:
            conn.close()
