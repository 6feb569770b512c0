"""`hearth serve`: load the model, then serve the API with uvicorn until Ctrl-C.

The model is loaded before the socket opens, so the line with the base URL means "ready". Loopback is
the default; any other address exposes the model to the network and is refused without an API key.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading

from app.core.errors import HearthError
from app.core.gguf.modelfile import above_trained_context
from app.server.responses.store import ResponseStore
from app.backends.client import EngineClient
from app.protocol.messages import LoadOptions
from app.backends.supervisor import Supervisor
from app.server.api_tools import STARTUP_WAIT_S, open_api_tools
from app.server.edge.guard import allowed_hosts, is_loopback, key_problem
from app.server.edge.limits import http_protocol
from app.server.models import ModelPool
from app.server.openai.endpoints import OpenAIApi
from app.server.options import ServeOptions


def open_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:  # OverflowError: a port past 65535
        sock.close()
        raise HearthError(f"Cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}.") from None
    sock.listen(128)
    return sock


class _Stopped(BaseException):
    """SIGTERM, raised where uvicorn re-raises it after its graceful shutdown: so that serve() closes the engines
    in order before the process ends by the signal (its default action would end it at once)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame) -> None:
    raise _Stopped(signum)


def _server(config, pool: ModelPool):
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            # A signal to the whole process group (Ctrl-C, a service manager's SIGTERM) has stopped the engines
            # too: none may start again while the server shuts down.
            pool.stop_restarting()
            super().handle_exit(sig, frame)

    return Server(config)


def serve(load: LoadOptions, options: ServeOptions, say=print) -> int:
    problem = key_problem(options.api_key)
    if problem:
        raise HearthError(f"{problem[:-1]} (--api-key or HEARTH_API_KEY).")
    if not is_loopback(options.host) and not options.api_key:
        raise HearthError(f"Listening on {options.host} would let anyone on the network use this model; "
                          "set an API key with --api-key KEY (or HEARTH_API_KEY) to do that.")
    if "*" in options.cors and not options.api_key:
        print("hearth: warning: --cors '*' without an API key lets any web page you visit use this model; set one "
              "with --api-key KEY (or HEARTH_API_KEY), or name the pages' origins instead of '*'.", file=sys.stderr,
              flush=True)
    import uvicorn

    backend = Supervisor()
    pool = api_tools = None
    stopped_by = None
    try:
        # Started in the background, beside the model's load; one not configured is said before anything loads.
        api_tools = open_api_tools(options.tools, options.tools_in_chat, wait=None)
        info = EngineClient(backend).load(load)
        for notice in (above_trained_context(info.get("n_ctx"), info.get("n_ctx_train")),
                       info.get("cannot_generate")):  # an embedding model serves /v1/embeddings only: said at once
            if notice:
                print(f"hearth: {notice}", file=sys.stderr, flush=True)
        sock = open_socket(options.host, options.port)
        sockets = [sock]
        if options.ollama_port is not None:
            sockets.append(open_socket(options.host, options.ollama_port))
        pool = ModelPool(backend, load, options.max_models, options.ttl_s)
        if api_tools is not None:
            # Before the line that says "serves": one that cannot start is said, and the server stops; one that is
            # slow to start does not hold it up, and is said (its tools are offered once it has started).
            api_tools.wait_started(STARTUP_WAIT_S)
            for problem in api_tools.not_ready():
                print(f"hearth: {problem} Requests get its tools once it has started.", file=sys.stderr, flush=True)
        store = ResponseStore(max_responses=options.keep_responses, max_age_days=options.keep_responses_days,
                              max_bytes=options.keep_responses_bytes)
        if store.notice:
            print(f"hearth: {store.notice}", file=sys.stderr, flush=True)
        api = OpenAIApi(pool, options.api_key, options.cors, options.sampling,
                        hosts=allowed_hosts(options.host, options.api_key, options.allowed_hosts),
                        limits=options.limits, slots=load.n_parallel, reasoning_format=options.reasoning_format,
                        response_store=store, api_tools=api_tools, strict_fields=options.strict_fields,
                        strict_models=options.strict_models)
        server = _server(uvicorn.Config(api, log_level="warning", lifespan="off", access_log=False,
                                        http=http_protocol(options.limits)), pool)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        # Named without listing the library: /health must answer before any scan of the folders it lists (a slow
        # or stuck one must not keep the server from answering); the listing is warmed up behind it.
        also = ""
        if len(sockets) > 1:
            also = f"; Ollama's API at http://{shown}:{sockets[1].getsockname()[1]} too"
        say(f"Hearth serves {pool.id_of(backend)} at http://{shown}:{port}/v1 (OpenAI-compatible{also}; Ctrl-C stops)",
            flush=True)
        threading.Thread(target=pool.warm_catalog, name="library-scan", daemon=True).start()
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _raise_stopped) if main else None
        try:
            server.run(sockets=sockets)
        except _Stopped as exc:
            stopped_by = exc.signum
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)
        return 0
    finally:
        if api_tools is not None:
            api_tools.close()
        if pool is not None:
            pool.close()
        backend.close()  # (again, if the pool had it: closing twice is harmless)
        if stopped_by is not None:  # end as a SIGTERM ends a program (a service manager reads it as a clean stop)
            signal.signal(stopped_by, signal.SIG_DFL)
            signal.raise_signal(stopped_by)


