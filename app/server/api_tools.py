"""The user's MCP servers offered to API clients (`hearth serve --tools NAME...`, off by default), as LM Studio
offers its own: a Responses request names one as `{"type": "mcp", "server_label": NAME}` and the server runs
the model's calls to it. A chat completions request may name one the same way only where the user asked for it
too (`--tools-in-chat`, app/server/openai/chat_mcp.py).

An API client cannot click the window's approval dialog, so a call runs only when the user has allowed that
tool for good ("Always" in the window, `hearth chat --tools`'s always; app/tools/servers.py's allow-list, read
at each call, so a change applies at once). Any other call is refused with a sentence that says so and how to
allow it; the model gets that sentence as the call's error and answers from it.

The calls are the user's programs, which may hang: they run on a pool of their own (MAX_CALLS_AT_ONCE threads),
never on the event loop's default executor, where a model is acquired, and a call whose client left is stopped.
Each server is started in the background, so a slow one does not hold `hearth serve` up: it has START_TIMEOUT_S to
answer, not the connect timeout a caller waits (a first `npx` or `uvx` start downloads the server; one slower
than the caller's wait was stopped at that wait and started again, for ever). A server that stops, or whose start
failed, is started again when it is next needed, at most MAX_RESTARTS times in RESTART_WINDOW_S; while it is not
running, its tools are not offered and the listing says why.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable

from app.backends.vocab import TokenCounter
from app.core.errors import HearthError
from app.tools.mcp_client import CALL_TIMEOUT_S, CONNECT_TIMEOUT_S, McpConnection, ToolInfo
from app.tools.servers import allowed_tools, get_server
from app.tools.tool_chat import cut_result

# Tool calls running at once, all servers together; more wait their turn there (a plain request never does).
MAX_CALLS_AT_ONCE = 8
MAX_RESTARTS = 3  # starts again of one server after it stopped, within RESTART_WINDOW_S
RESTART_WINDOW_S = 600.0
# How long a server started in the background may take to answer; a call waits CONNECT_TIMEOUT_S of it at most.
START_TIMEOUT_S = 300.0
# How long `hearth serve` waits for its servers' first start before it serves without the ones not ready yet.
STARTUP_WAIT_S = 10.0
DISCONNECT_CHECK_S = 0.5  # how often a running call looks whether its client is still there
# A request naming a server that is starting waits this long for it: a restart takes a second or two.
SETTLE_WAIT_S = 10.0
SETTLE_POLL_S = 0.1


class _Offered:
    """One offered server: its connection, started in the background, and started again (within the bound)
    when it has stopped. Its state is read by the event loop without waiting."""

    def __init__(self, name: str, start_timeout: float):
        self.name, self.start_timeout = name, start_timeout
        self.conn: McpConnection | None = None
        self.problem: str | None = None  # why it is not serving, as a sentence
        self.failed_at_start = False  # its first start ended in an error (not a slow start)
        self.failure: str | None = None  # why its last start failed, while it has not started since
        self._starts: list[float] = []
        self._starting: threading.Thread | None = None
        self._opening: McpConnection | None = None  # the connection being started
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        """Start it in the background unless it runs, a start is under way, or the bound on restarts is spent."""
        with self._lock:
            if self._closed or (self.conn is not None and self.conn.alive) or \
                    (self._starting is not None and self._starting.is_alive()):
                return
            now = time.monotonic()
            self._starts = [t for t in self._starts if now - t < RESTART_WINDOW_S]
            if len(self._starts) > MAX_RESTARTS:
                self.problem = (f"The MCP server '{self.name}' {'could not be started' if self.failure else 'stopped'} "
                                f"{len(self._starts)} times within {RESTART_WINDOW_S / 60:g} minutes, so Hearth does "
                                f"not start it again for now; its log is {self._log_path()}.")
                return
            first = not self._starts
            self._starts.append(now)
            if first:
                self.problem = f"The MCP server '{self.name}' is not ready yet: it is still starting."
            elif self.failure:  # the reason its last start failed stays in what the listing says
                self.problem = f"{self.failure.rstrip('.')}; Hearth is starting it again."
            else:
                self.problem = f"The MCP server '{self.name}' stopped{self._last_words()}; Hearth is starting it again."
            self._starting = threading.Thread(target=self._open, args=(first,), name=f"mcp-start-{self.name}",
                                              daemon=True)
            self._starting.start()

    def _open(self, first: bool) -> None:
        if self.conn is not None:  # the stopped one: its thread and process are let go first
            self.conn.close()
        try:
            # Kept while it starts, so that closing stops a start under way (it may take START_TIMEOUT_S).
            self._opening = McpConnection(get_server(self.name), self.start_timeout)
            conn = self._opening.open()
        except HearthError as exc:  # it cannot start, in time or at all (or mcp.json changed): one sentence
            with self._lock:
                self.conn, self.problem, self.failure, self.failed_at_start = None, str(exc), str(exc), first
            return
        with self._lock:
            if self._closed:
                conn.close()
                return
            self.conn, self.problem, self.failure = conn, None, None

    def ready(self) -> McpConnection | None:
        """The running connection, or None (a stopped one is started again in the background); never waits."""
        conn = self.conn
        if conn is not None and conn.alive:
            return conn
        self.start()
        return None

    def wait_ready(self, timeout: float, stop: threading.Event | None = None) -> McpConnection | None:
        """The running connection, waiting up to timeout for a start under way (one is begun if needed); a call
        stops waiting when its client leaves (stop set), so that it gives its thread back."""
        conn = self.ready()
        starting = self._starting
        deadline = time.monotonic() + timeout
        while conn is None and starting is not None and starting.is_alive() and time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                return None
            starting.join(min(DISCONNECT_CHECK_S, max(0.0, deadline - time.monotonic())))
        if conn is None and starting is not None:
            conn = self.conn if self.conn is not None and self.conn.alive else None
        return conn

    def starting(self) -> bool:
        starting = self._starting
        return starting is not None and starting.is_alive()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn, opening = self.conn, self._opening
        if opening is not None and opening is not conn:
            opening.close()
        if conn is not None:
            conn.close()

    def _last_words(self) -> str:
        return self.conn.last_words() if self.conn is not None else ""

    def _log_path(self):
        from app.core import paths

        return paths.log_dir() / f"mcp-{self.name}.log"


class ApiTools:
    """The offered servers, started in the background when the server starts, and the pool their calls run on."""

    def __init__(self, names: list[str], start_timeout: float = START_TIMEOUT_S, in_chat: bool = False):
        """in_chat: offered through /v1/chat/completions too (app/server/openai/chat_mcp.py), not only /v1/responses."""
        for name in names:
            get_server(name)  # one that is not configured is a sentence before anything starts
        self.in_chat = in_chat
        self._servers = {name: _Offered(name, start_timeout) for name in names}
        self._calls = ThreadPoolExecutor(MAX_CALLS_AT_ONCE, thread_name_prefix="hearth-mcp-call")
        self._stops: set[threading.Event] = set()  # the calls under way: closing stops them (their threads end)
        for server in self._servers.values():
            server.start()

    @property
    def labels(self) -> list[str]:
        return list(self._servers)

    def wait_started(self, timeout: float = STARTUP_WAIT_S, all_of_them: bool = False) -> None:
        """Wait up to timeout for the servers' first starts. Raises the sentence of one that could not start (as
        a server that fails is said before the server serves); one still starting is left to start (not_ready()
        says so), unless all_of_them: then it is a sentence too."""
        deadline = time.monotonic() + timeout
        for server in self._servers.values():
            server.wait_ready(max(0.0, deadline - time.monotonic()))
        failed = next((s for s in self._servers.values() if s.failed_at_start), None)
        if failed is not None:
            raise HearthError(failed.problem)
        late = next((s for s in self._servers.values() if all_of_them and s.ready() is None), None)
        if late is not None:
            raise HearthError(f"The MCP server '{late.name}' did not answer within {timeout:g} s.")

    def not_ready(self) -> list[str]:
        """A sentence for each server that is not serving now."""
        return [s.problem or f"The MCP server '{s.name}' is not running." for s in self._servers.values()
                if s.ready() is None]

    def close(self) -> None:
        for stop in list(self._stops):
            stop.set()  # a call that hangs would hold the process's exit for its whole timeout
        self._calls.shutdown(wait=False, cancel_futures=True)
        for server in self._servers.values():
            server.close()

    def tools(self, label: str, only: list[str] | None = None) -> list[ToolInfo]:
        """The server's tools (those named in `only` when the request narrows them); none while it is not
        running (problem() says why)."""
        conn = self._servers[label].ready()
        return [t for t in (conn.tools if conn is not None else []) if only is None or t.name in only]

    def problem(self, label: str) -> str | None:
        """Why the server's tools are not offered now; None while it runs."""
        server = self._servers[label]
        return None if server.ready() is not None else server.problem

    def functions(self, label: str, only: list[str] | None = None) -> list[dict]:
        return [t.function() for t in self.tools(label, only)]

    async def call(self, label: str, tool: str, arguments: dict, n_ctx: int, model_path: str | None,
                   gone: Callable[[], Awaitable[bool]] | None = None,
                   timeout: float = CALL_TIMEOUT_S) -> tuple[str | None, str | None] | None:
        """(output, error) of one call, under the user's allow-list, on the tools' own pool, its text within the
        share of the context (n_ctx tokens, counted in model_path's vocabulary) that `hearth chat` gives a result.
        None when the client left meanwhile (gone(), polled; or this coroutine cancelled): the call is stopped."""
        stop = threading.Event()
        self._stops.add(stop)
        future = asyncio.get_running_loop().run_in_executor(
            self._calls, self._call, label, tool, arguments, n_ctx, model_path, timeout, stop)
        try:
            while True:
                done, _ = await asyncio.wait({future}, timeout=DISCONNECT_CHECK_S)
                if done:
                    return future.result()
                if gone is not None and await gone():
                    stop.set()
                    future.cancel()
                    return None
        except asyncio.CancelledError:
            stop.set()
            future.cancel()
            raise
        finally:
            self._stops.discard(stop)

    async def settle(self, labels: list[str]) -> None:
        """Wait for the named servers' starts under way (one that stopped is started again here), so that a
        request naming one that is starting again lists its tools; at most SETTLE_WAIT_S (a slow one is then said
        to be not ready in the listing). Polled on the loop: no thread is taken from anyone."""
        servers = [self._servers[label] for label in labels if label in self._servers]
        deadline = time.monotonic() + SETTLE_WAIT_S
        while any(s.ready() is None and s.starting() for s in servers) and time.monotonic() < deadline:
            await asyncio.sleep(SETTLE_POLL_S)

    def _call(self, label: str, tool: str, arguments: dict, n_ctx: int, model_path: str | None, timeout: float,
              stop: threading.Event) -> tuple[str | None, str | None]:
        if stop.is_set():  # the client left while the call waited for a thread
            return None, "The client left before this call ran."
        if tool not in allowed_tools(label):
            return None, (f"The user of this Hearth has not allowed the tool '{tool}' of MCP server '{label}' for "
                          "programs that call its API, so it did not run. They can allow it for good in the "
                          "window's Tools page or when `hearth chat --tools` asks (Always).")
        server = self._servers[label]
        conn = server.wait_ready(CONNECT_TIMEOUT_S, stop)  # of a start under way, which may go on longer
        if stop.is_set():
            return None, "The client left before this call ran."
        if conn is None:
            return None, server.problem or f"The MCP server '{label}' is not running."
        result = conn.call(tool, arguments, timeout, stop)
        counter = TokenCounter(model_path)  # the model's own tokens, as `hearth chat` counts them
        text, _note = cut_result(result.text, n_ctx, counter.count)
        return (None, text) if result.is_error else (text, None)


def open_api_tools(names: list[str], in_chat: bool = False, wait: float | None = CONNECT_TIMEOUT_S) -> ApiTools | None:
    """The servers to offer, or None when none is asked for; one that is not configured is one sentence, and so
    is one that cannot start within `wait` seconds (the window's Server page waits so, on its worker). wait None:
    they start in the background, and the caller waits for them (wait_started) when it likes: `hearth serve`
    loads its model meanwhile. in_chat: offered through chat completions too (hearth serve --tools-in-chat)."""
    check_tools(names, in_chat)
    if not names:
        return None
    tools = ApiTools(names, in_chat=in_chat)
    if wait is not None:
        try:
            tools.wait_started(wait, all_of_them=True)
        except BaseException:
            tools.close()
            raise
    return tools


def check_tools(names: list[str], in_chat: bool) -> None:
    """What --tools and --tools-in-chat ask, checked before any model loads."""
    if in_chat and not names:
        raise HearthError("--tools-in-chat offers the MCP servers of --tools in chat completions too; name them "
                          "with --tools NAME.")
    if len(set(names)) != len(names):
        raise HearthError("--tools names a server twice.")
