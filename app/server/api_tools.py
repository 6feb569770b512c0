"""The user's MCP servers offered to API clients (`hearth serve --tools NAME...`, off by default), as LM Studio
offers its own: a Responses request names one as `{"type": "mcp", "server_label": NAME}` and the server runs
the model's calls to it. A chat completions request may name one the same way only where the user asked for it
too (`--tools-in-chat`, app/server/chat_mcp.py).

An API client cannot click the window's approval dialog, so a call runs only when the user has allowed that
tool for good ("Always" in the window, `hearth chat --tools`'s always; app/tools/servers.py's allow-list, read
at each call, so a change applies at once). Any other call is refused with a sentence that says so and how to
allow it; the model gets that sentence as the call's error and answers from it.
"""

from __future__ import annotations

from app.core.errors import HearthError
from app.tools.mcp_client import CALL_TIMEOUT_S, McpConnection
from app.tools.servers import allowed_tools
from app.tools.tool_chat import open_tool_set


class ApiTools:
    """Connections to the offered servers, opened once when the server starts."""

    def __init__(self, names: list[str], connect_timeout: float | None = None, in_chat: bool = False):
        """in_chat: offered through /v1/chat/completions too (app/server/chat_mcp.py), not only /v1/responses."""
        # As the chat opens them: a server that cannot start is one sentence, and the ones started are closed.
        opened = open_tool_set(names, connect_timeout=connect_timeout)
        self.in_chat = in_chat
        self.by_label: dict[str, McpConnection] = {conn.entry.name: conn for conn in opened.connections}

    @property
    def labels(self) -> list[str]:
        return list(self.by_label)

    def close(self) -> None:
        for conn in self.by_label.values():
            conn.close()

    def tools(self, label: str, only: list[str] | None = None):
        """The server's tools (ToolInfo), those named in `only` when the request narrows them."""
        conn = self.by_label[label]
        return [t for t in conn.tools if only is None or t.name in only]

    def functions(self, label: str, only: list[str] | None = None) -> list[dict]:
        return [t.function() for t in self.tools(label, only)]

    def call(self, label: str, tool: str, arguments: dict, timeout: float = CALL_TIMEOUT_S) -> tuple[str | None, str | None]:
        """(output, error) of one call, under the user's allow-list."""
        if tool not in allowed_tools(label):
            return None, (f"The user of this Hearth has not allowed the tool '{tool}' of MCP server '{label}' for "
                          "programs that call its API, so it did not run. They can allow it for good in the "
                          "window's Tools page or when `hearth chat --tools` asks (Always).")
        result = self.by_label[label].call(tool, arguments, timeout)
        return (None, result.text) if result.is_error else (result.text, None)


def open_api_tools(names: list[str], in_chat: bool = False) -> ApiTools | None:
    """The servers to offer, or None when none is asked for; a server that cannot start is one sentence.
    in_chat: offered through chat completions too (hearth serve --tools-in-chat)."""
    check_tools(names, in_chat)
    return ApiTools(names, in_chat=in_chat) if names else None


def check_tools(names: list[str], in_chat: bool) -> None:
    """What --tools and --tools-in-chat ask, checked before any model loads."""
    if in_chat and not names:
        raise HearthError("--tools-in-chat offers the MCP servers of --tools in chat completions too; name them "
                          "with --tools NAME.")
    if len(set(names)) != len(names):
        raise HearthError("--tools names a server twice.")
