"""A small stdio MCP server, written with the mcp SDK's server side, whose tools fail the ways real servers do:
`crash` kills the server's process in the middle of the call, `hang` never answers (and holds the server), `sleep`
never answers while the server answers other calls, `long_text`, `sized` and `huge` answer with far more text than a
model's context holds; `env` says what an environment variable was set to when it started (how a secret kept in
the keyring reaches a server); `tick` counts its calls in the file $MISBEHAVING_TICKS (what the server received, as
its user would check it).

Started with `--start-after SECONDS` it answers nothing until then (a server slow to start); with `--not-mcp` it
answers the client's first message with a line that is not JSON, then waits; with `--broken-json`, with a line that
begins as JSON and breaks off. With `--http PORT` it serves the same tools over streamable HTTP, each answer one JSON
body (the SDK's json_response)."""

import os
import sys
import time

import anyio

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
async def sleep(reason: str = "") -> str:
    """Answers after an hour; the server goes on answering other calls meanwhile (a call its client cancels ends
    at once)."""
    await anyio.sleep(3600)
    return "slept"


@server.tool()
def long_text(words: int = 20000) -> str:
    """A very long answer."""
    return " ".join(f"word{i}" for i in range(words))


@server.tool()
def env(name: str) -> str:
    """The value of an environment variable of this server's process."""
    return os.environ.get(name, "(not set)")


@server.tool()
def sized(size: int = 1_000_000) -> str:
    """A result of `size` bytes of words."""
    return ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]


@server.tool()
def huge() -> str:
    """A result of 50 MB."""
    return "lorem ipsum dolor sit amet " * (50_000_000 // 27)


@server.tool()
def tick(note: str = "") -> str:
    """Counts this call."""
    with open(os.environ["MISBEHAVING_TICKS"], "a") as fh:
        fh.write(f"tick {note}\n")
    return "ticked"


if __name__ == "__main__":
    if "--start-after" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--start-after") + 1]))
    if "--not-mcp" in sys.argv:
        sys.stdin.readline()
        print("this is not an MCP message", flush=True)
        time.sleep(3600)
    if "--broken-json" in sys.argv:
        sys.stdin.readline()
        print('{"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": ', flush=True)
        time.sleep(3600)
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        anyio.run(lambda: server.run_streamable_http_async(port=port, json_response=True))
    else:
        server.run("stdio")
