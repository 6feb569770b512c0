"""One connection to an MCP server through the official `mcp` SDK, for callers that are not async.

The SDK is asyncio; the CLI and the window are not. Each connection runs its own event loop on a thread of
its own, and the caller waits on it with a timeout, so a server that hangs costs the caller the timeout and a
server that crashes costs it one error result: never a hang, never a traceback. A stdio server's own stderr
goes to a log file (logs/mcp-NAME.log), not into the chat; its last line is quoted when the server fails.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Any

from app.core import paths
from app.core.errors import DependencyMissing, HearthError
from app.tools import stdio_lines
from app.tools.limits import CALL_TIMEOUT_S, CONNECT_TIMEOUT_S
from app.tools.servers import ServerEntry

# A server that writes something other than MCP before its first answer, and no answer this long after it, is
# taken as one that does not speak MCP (a banner line followed by a real answer still works).
NOT_MCP_GRACE_S = 2.0
LOG_TAIL_BYTES = 16 * 1024  # of a server's log, read for its last words


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
    except ImportError:  # a source install without its dependencies (the bundle and the .deb carry the SDK)
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


def _bad_line(exc: BaseException):
    """The line a server wrote that the SDK could not read as MCP (its error is a pydantic report), or None."""
    errors = getattr(exc, "errors", None)
    try:
        return errors()[0].get("input") if callable(errors) else None
    except (IndexError, TypeError, ValueError):
        return None


def _not_mcp(exc: BaseException) -> str:
    """What a server wrote that is not an MCP message, as a phrase."""
    line = _bad_line(exc)
    shown = f" ({str(line)[:80]!r})" if line is not None else ""
    return f"it answered with something that is not an MCP message{shown}"


def _broken_json(exc: BaseException) -> bool:
    """Whether the line begins as JSON but is not JSON: a broken answer, never a banner before the real one (a
    JSON log line a server prints by mistake parses, and still gets the grace)."""
    line = _bad_line(exc)
    if not isinstance(line, str) or not line.lstrip().startswith(("{", "[")):
        return False
    import json

    try:
        json.loads(line)
    except ValueError:
        return True
    return False


class _SdkLog(logging.Handler):
    """The SDK's log records of one connection (its event loop's thread) into that server's log file: the SDK
    logs a server's bad line with its whole traceback, which printed on the user's terminal."""

    PREFIX = "hearth (MCP client): "  # not the server's own words, which a failure quotes

    def __init__(self, thread_name: str, errlog):
        super().__init__(logging.WARNING)
        self.thread_name, self.errlog = thread_name, errlog

    def emit(self, record: logging.LogRecord) -> None:
        if record.threadName == self.thread_name:
            try:
                self.errlog.write(f"{self.PREFIX}{record.getMessage()}\n")
                self.errlog.flush()
            except (OSError, ValueError):
                pass


class _Watch:
    """What the server's stdout reader tells one connection (app/tools/stdio_lines.py's Watcher)."""

    def __init__(self, conn: McpConnection, errlog):
        self.conn, self.errlog = conn, errlog

    def output_ended(self) -> None:
        # Before the session is up, the start's own error says it; after, the connection is taken down at once,
        # not at the next call's "Connection closed" (its tools were listed meanwhile).
        if self.conn._ready.is_set():
            self.conn._connection_ended()

    def note(self, text: str) -> None:
        try:
            self.errlog.write(f"{_SdkLog.PREFIX}{text}\n")
            self.errlog.flush()
        except (OSError, ValueError):
            pass


def _sdk_logger() -> logging.Logger:
    """The SDK's logger, kept off the terminal: no record reaches Python's last-resort stderr handler."""
    logger = logging.getLogger("mcp")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    return logger


def _closed_connection(exc: BaseException) -> bool:
    """Whether an SDK error says the connection to the server ended (its CONNECTION_CLOSED error)."""
    from mcp.types import CONNECTION_CLOSED

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    error = getattr(exc, "error", None)  # the SDK's MCPError: a server may answer -32000 for its own errors too
    return getattr(error, "code", None) == CONNECTION_CLOSED and getattr(error, "message", "") == "Connection closed"


def _reason(exc: BaseException) -> str:
    """The innermost cause of an SDK failure (anyio wraps them in exception groups), as a phrase."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    from app.tools.http_bounded import plain_reason  # (httpx2 only once a call fails)

    text = str(exc).strip().rstrip(".") or type(exc).__name__
    return plain_reason(text.splitlines()[0][:300])


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
        # A keeper may close a connection while another thread is opening it: the thread is started, or the
        # connection marked closed, under this lock, so that close() never joins a thread not yet started.
        self._starting = threading.Lock()
        self._closed = False
        self._broken = False  # its server's side ended while the session was open
        self._started = entry

    # -- starting and stopping ------------------------------------------------------------------------------

    def open(self) -> McpConnection:
        _sdk()
        if self.entry.command and shutil.which(self.entry.command) is None:
            raise ToolServerError(f"MCP server '{self.entry.name}': there is no program '{self.entry.command}' "
                                  "to start (is it installed, and on PATH?).")
        from app.tools.server_secrets import resolved

        self._started = resolved(self.entry)  # its keyring references as their values, for this start only
        with self._starting:
            if self._closed:
                raise ToolServerError(f"MCP server '{self.entry.name}' was closed while it started.")
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
        with self._starting:
            self._closed = True
            thread = self._thread
        loop, task = self._loop, self._task
        if loop is not None and not self._ended.is_set():
            try:
                loop.call_soon_threadsafe(self._closing.set if self._client is not None else task.cancel)
            except RuntimeError:  # the loop has ended already
                pass
        if thread is not None:
            thread.join(10)

    def __enter__(self) -> McpConnection:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self._ready.is_set() and not self._ended.is_set() and not self._broken

    def _connection_ended(self) -> None:
        """The server's side is gone (its process ended): the SDK session stays open and answers every call with
        "Connection closed", so it is taken down here, and whoever keeps it (ServerPool, the API's offered servers)
        starts the server again instead of listing tools nobody can call."""
        self._broken = True
        if self._loop is not None and self._closing is not None:
            try:
                self._loop.call_soon_threadsafe(self._closing.set)
            except RuntimeError:  # the loop has ended already
                pass

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
            sdk_log = _SdkLog(threading.current_thread().name, errlog)
            _sdk_logger().addHandler(sdk_log)
            # The server's stdout reader (the SDK's task, started inside Client) inherits this: it tells this
            # connection when the server's output ends, and logs what it would not read (app/tools/stdio_lines.py).
            stdio_lines.watching.set(_Watch(self, errlog))
            try:
                async with Client(self._transport(errlog), cache=None, mode="legacy",
                                  message_handler=self._on_message) as client:
                    listed = await client.list_tools()
                    self.server_name = getattr(client.server_info, "name", "") or ""
                    self.tools = [ToolInfo(self.entry.name, t.name, t.description or "",
                                           t.input_schema or {"type": "object", "properties": {}})
                                  for t in listed.tools]
                    self._client = client
                    self._ready.set()
                    await self._closing.wait()
            except BaseException as exc:
                self._error = self._error or exc
                self._client = None if not self._ready.is_set() else self._client
            finally:
                _sdk_logger().removeHandler(sdk_log)

    async def _on_message(self, message) -> None:
        """The SDK's news: a line that is not MCP before the first answer ends the start once no answer follows
        within NOT_MCP_GRACE_S (the SDK would drop it and wait for the answer until the connect timeout); a line
        of broken JSON ends it at once, since it was the answer."""
        if not isinstance(message, Exception) or self._ready.is_set():
            return
        if not _broken_json(message):
            await asyncio.sleep(NOT_MCP_GRACE_S)
        if not self._ready.is_set() and self._task is not None:
            self._error = ToolServerError(_not_mcp(message))
            self._task.cancel()

    def _transport(self, errlog):
        entry = self._started
        if entry.command:
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            stdio_lines.install()  # each line bounded, and the end of the output said (app/tools/stdio_lines.py)
            return stdio_client(StdioServerParameters(command=entry.command, args=entry.args, env=entry.env or None),
                                errlog=errlog)
        from mcp.client.streamable_http import streamable_http_client

        from app.tools.http_bounded import bounded_client  # each JSON answer bounded, as a stdio line is

        return streamable_http_client(entry.url, http_client=bounded_client(headers=entry.headers or None))

    def last_words(self) -> str:
        """" (its last words: ...)": the last line the server wrote to its log, or ""."""
        return self._last_log_line()

    def _last_log_line(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:  # its tail only: a server may have written gigabytes there
                fh.seek(max(0, fh.seek(0, 2) - LOG_TAIL_BYTES))
                tail = fh.read(LOG_TAIL_BYTES).decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [line.strip() for line in tail.splitlines()[-20:]
                 if line.strip() and not line.startswith(_SdkLog.PREFIX)]
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
                if _closed_connection(exc):
                    self._connection_ended()
                error = f"The tool '{tool}' of MCP server '{name}' failed: {_reason(exc)}{self._last_log_line()}."
                break
        seconds = time.monotonic() - started
        if error is not None:
            return ToolResult(error, True, seconds)
        return ToolResult(_result_text(result), bool(result.is_error), seconds)
