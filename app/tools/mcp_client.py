"""One connection to an MCP server through the official `mcp` SDK, for callers that are not async.

The SDK is asyncio; the CLI and the window are not. Each connection runs its own event loop on a thread of
its own, and the caller waits on it with a timeout, so a server that hangs costs the caller the timeout and a
server that crashes costs it one error result: never a hang, never a traceback. A stdio server's own stderr
goes to a log file (logs/mcp-NAME.log), not into the chat; its last line is quoted when the server fails.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Any

from app.core import paths
from app.core.errors import DependencyMissing, HearthError
from app.tools.servers import ServerEntry

CONNECT_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 60.0


class ToolServerError(HearthError):
    """An MCP server could not be started or reached; the message says which and why."""


@dataclass
class ToolInfo:
    server: str
    name: str
    description: str
    schema: dict  # the tool's input JSON schema

    def function(self) -> dict:
        """The tool as the chat template and the call grammar take it (OpenAI's function tool)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.schema}}


@dataclass
class ToolResult:
    text: str
    is_error: bool = False
    seconds: float = 0.0


def _sdk():
    try:
        import mcp
    except ImportError:
        from app.core.proc import is_frozen

        if is_frozen():  # the bundle and the .deb leave out pydantic, which the SDK needs (packaging/hearth.spec)
            raise DependencyMissing("This build of Hearth does not include the MCP SDK, so it cannot use tools yet; "
                                    "Hearth installed with pip can (pip install hearth, then hearth tools).") from None
        raise DependencyMissing("Tools need the MCP SDK: pip install mcp") from None
    return mcp


def _result_text(result) -> str:
    """A CallToolResult as the text the model reads: its text blocks, the others named."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(block.resource, "text", None) is not None:
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'content'} {getattr(block, 'mime_type', '') or ''}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _reason(exc: BaseException) -> str:
    """The innermost cause of an SDK failure (anyio wraps them in exception groups), as a phrase."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().rstrip(".") or type(exc).__name__
    return text.splitlines()[0][:300]


class McpConnection:
    def __init__(self, entry: ServerEntry, connect_timeout: float = CONNECT_TIMEOUT_S):
        self.entry = entry
        self.connect_timeout = connect_timeout
        self.tools: list[ToolInfo] = []
        self.server_name = ""  # what the server calls itself
        self.log_path = paths.log_dir() / f"mcp-{entry.name}.log"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client = None
        self._closing: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._ready = threading.Event()
        self._ended = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._started = entry

    # -- starting and stopping ------------------------------------------------------------------------------

    def open(self) -> McpConnection:
        _sdk()
        if self.entry.command and shutil.which(self.entry.command) is None:
            raise ToolServerError(f"MCP server '{self.entry.name}': there is no program '{self.entry.command}' "
                                  "to start (is it installed, and on PATH?).")
        from app.tools.server_secrets import resolved

        self._started = resolved(self.entry)  # its keyring references as their values, for this start only
        self._thread = threading.Thread(target=self._run, name=f"mcp-{self.entry.name}", daemon=True)
        self._thread.start()
        if not self._ready.wait(self.connect_timeout):
            self.close()
            raise ToolServerError(f"MCP server '{self.entry.name}' did not answer within {self.connect_timeout:g} s"
                                  f"{self._last_log_line()}.")
        if self._error is not None or self._client is None:
            why = _reason(self._error) if self._error is not None else "it stopped"
            self.close()
            raise ToolServerError(f"MCP server '{self.entry.name}' ({self.entry.describe()}) could not be "
                                  f"started: {why}{self._last_log_line()}.")
        return self

    def close(self) -> None:
        loop, task = self._loop, self._task
        if loop is not None and not self._ended.is_set():
            try:
                loop.call_soon_threadsafe(self._closing.set if self._client is not None else task.cancel)
            except RuntimeError:  # the loop has ended already
                pass
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> McpConnection:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self._ready.is_set() and not self._ended.is_set()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._task = loop.create_task(self._serve())
            loop.run_until_complete(self._task)
        except BaseException as exc:  # cancelled while connecting, or the SDK gave up
            self._error = self._error or exc
        finally:
            self._ended.set()
            self._ready.set()
            loop.close()

    async def _serve(self) -> None:
        from mcp import Client

        self._closing = asyncio.Event()
        with open(self.log_path, "a", encoding="utf-8", errors="replace") as errlog:
            try:
                async with Client(self._transport(errlog), cache=None, mode="legacy") as client:
                    listed = await client.list_tools()
                    self.server_name = getattr(client.server_info, "name", "") or ""
                    self.tools = [ToolInfo(self.entry.name, t.name, t.description or "",
                                           t.input_schema or {"type": "object", "properties": {}})
                                  for t in listed.tools]
                    self._client = client
                    self._ready.set()
                    await self._closing.wait()
            except BaseException as exc:
                self._error = exc
                self._client = None if not self._ready.is_set() else self._client

    def _transport(self, errlog):
        entry = self._started
        if entry.command:
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            return stdio_client(StdioServerParameters(command=entry.command, args=entry.args, env=entry.env or None),
                                errlog=errlog)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        return streamable_http_client(entry.url, http_client=create_mcp_http_client(headers=entry.headers or None))

    def _last_log_line(self) -> str:
        try:
            lines = [line.strip() for line in self.log_path.read_text(encoding="utf-8", errors="replace")
                     .splitlines()[-20:] if line.strip()]
        except OSError:
            return ""
        return f" (its last words: {lines[-1][:200]})" if lines else ""

    # -- calls ------------------------------------------------------------------------------------------------

    def call(self, tool: str, arguments: dict[str, Any], timeout: float = CALL_TIMEOUT_S,
             stop: threading.Event | None = None) -> ToolResult:
        """The tool's result; a server that fails, crashes or takes longer than timeout gives an error result,
        and so does a call the user stops (stop set: the window's Esc) while it runs."""
        name = self.entry.name
        started = time.monotonic()
        if not self.alive or self._client is None:
            return ToolResult(f"The MCP server '{name}' is not running{self._last_log_line()}.", True)
        future = asyncio.run_coroutine_threadsafe(self._client.call_tool(tool, arguments), self._loop)
        result, error = None, None
        deadline = started + timeout
        while True:  # waits in short steps, so that a server that dies mid-call ends the wait at once
            try:
                result = future.result(min(0.2, max(0.0, deadline - time.monotonic())))
                break
            except TimeoutError:
                if stop is not None and stop.is_set():
                    future.cancel()
                    error = f"The call to '{tool}' was stopped before MCP server '{name}' answered."
                    break
                if self._ended.is_set():
                    future.cancel()
                    error = f"The MCP server '{name}' stopped during the call{self._last_log_line()}."
                    break
                if time.monotonic() >= deadline:
                    future.cancel()
                    error = (f"The tool '{tool}' of MCP server '{name}' gave no result within {timeout:g} s; "
                             "the call was stopped.")
                    break
            except BaseException as exc:
                error = f"The tool '{tool}' of MCP server '{name}' failed: {_reason(exc)}{self._last_log_line()}."
                break
        seconds = time.monotonic() - started
        if error is not None:
            return ToolResult(error, True, seconds)
        return ToolResult(_result_text(result), bool(result.is_error), seconds)
