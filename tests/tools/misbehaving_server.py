"""A small stdio MCP server, written with the mcp SDK's server side, whose tools fail the ways real servers do:
`crash` kills the server's process in the middle of the call, `hang` never answers, `long_text` answers with far
more text than a model's context holds; `env` says what an environment variable was set to when it started (how a
secret kept in the keyring reaches a server)."""

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("misbehaving")


@server.tool()
def crash(reason: str = "") -> str:
    """Stops the server mid-call."""
    print("misbehaving server: crashing as asked", file=sys.stderr, flush=True)
    os._exit(7)


@server.tool()
def hang(reason: str = "") -> str:
    """Never answers."""
    time.sleep(3600)
    return "late"


@server.tool()
def long_text(words: int = 20000) -> str:
    """A very long answer."""
    return " ".join(f"word{i}" for i in range(words))


@server.tool()
def env(name: str) -> str:
    """The value of an environment variable of this server's process."""
    return os.environ.get(name, "(not set)")


if __name__ == "__main__":
    server.run("stdio")
