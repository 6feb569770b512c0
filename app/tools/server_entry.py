"""One MCP server as mcp.json describes it, and the error a bad entry is; apart from the file's reading and
writing (app/tools/servers.py) so that the secrets its entries refer to (app/tools/server_secrets.py) can name
it without going round in a circle."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.errors import HearthError


class ToolsConfigError(HearthError):
    """mcp.json or an entry in it cannot be used; the message says which and why."""


@dataclass
class ServerEntry:
    name: str
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    disabled: bool = False

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def describe(self) -> str:
        if self.command:
            return " ".join([self.command, *self.args])
        return self.url or ""

    def to_json(self) -> dict:
        if self.command:
            out: dict = {"command": self.command, "args": self.args}
            if self.env:
                out["env"] = self.env
        else:
            out = {"type": "http", "url": self.url}
            if self.headers:
                out["headers"] = self.headers
        if self.disabled:
            out["disabled"] = True
        return out
