"""`hearth serve`'s API inside the window: uvicorn on a thread, over the window's own backend.

The window keeps its engine: the API serves the very Supervisor the Chat page talks to, so the model
is loaded once and the window can chat while the API serves (the engine queues the requests). The
same pieces as app.server.run (its socket opener, OpenAIApi), so both serve the same API; uvicorn
stops at the next turn of its loop after `should_exit` is set, finishing the requests in flight.
"""

from __future__ import annotations

import threading
from typing import Callable

from app.core.errors import HearthError
from app.backends.backend import Backend
from app.server.api_tools import ApiTools, open_api_tools
from app.server.openai.endpoints import OpenAIApi, RequestRecord
from app.server.edge.guard import allowed_hosts, is_loopback, key_problem
from app.server.edge.limits import http_protocol
from app.server.options import ServeOptions
from app.server.run import open_socket

STOP_TIMEOUT_S = 5.0


def base_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


class BackgroundServer:
    def __init__(self, backend: Backend, on_request: Callable[[RequestRecord], None] | None = None):
        """on_request is called on the server's thread once per finished request."""
        self.backend = backend
        self.on_request = on_request
        self.url: str | None = None  # while serving
        self._server = None
        self._api = None  # the app served (its close ends its threads)
        self._thread: threading.Thread | None = None
        self.api_tools: ApiTools | None = None  # the MCP servers offered to API clients (settings.tools), while serving

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, settings: ServeOptions) -> str:
        """Listen and serve; returns the base URL, or raises HearthError with the sentence why not."""
        import uvicorn

        if self.running:
            raise HearthError(f"The server is already running at {self.url}.")
        problem = key_problem(settings.api_key)
        if problem:
            raise HearthError(problem)
        if not is_loopback(settings.host) and not settings.api_key:
            raise HearthError(f"Listening on {settings.host} would let anyone on the network use this model; "
                              "set an API key first.")
        sock = open_socket(settings.host, settings.port)
        try:  # as hearth serve --tools: started before the server says it serves; one that cannot start is said
            self.api_tools = open_api_tools(settings.tools, settings.tools_in_chat)
        except BaseException:
            sock.close()
            raise
        api = OpenAIApi(self.backend, settings.api_key, settings.cors, settings.sampling, on_request=self.on_request,
                        hosts=allowed_hosts(settings.host, settings.api_key, settings.allowed_hosts),
                        limits=settings.limits, reasoning_format=settings.reasoning_format, api_tools=self.api_tools)
        # log_config=None: uvicorn must not reconfigure the window's logging. The same limits as hearth serve: a
        # request head's deadline and the connection cap live in uvicorn's HTTP protocol (app/server/edge/limits.py).
        server = uvicorn.Server(uvicorn.Config(api, log_level="warning", lifespan="off", access_log=False,
                                               log_config=None, http=http_protocol(settings.limits)))
        host, port = sock.getsockname()[:2]

        def serve() -> None:
            try:
                server.run(sockets=[sock])
            finally:
                sock.close()

        self._server, self._api = server, api
        self._thread = threading.Thread(target=serve, name="hearth-api-server", daemon=True)
        self._thread.start()
        self.url = base_url(host, port)
        return self.url

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        if self.api_tools is not None:
            self.api_tools.close()  # the MCP servers it started end with it
        if self._api is not None:
            self._api.close()
        self._server = self._thread = self.url = self.api_tools = self._api = None
