"""`hearth serve`: an OpenAI- and Anthropic-compatible API for other programs (editors, scripts, agents)."""

from __future__ import annotations

import argparse
import os

from app.commands.options import SECONDS, add_load_args, at_least, load_options, within
from app.core import env
from app.core.gguf.modelfile import check_model_file
from app.protocol.option_fields import accepted

API_KEY_ENV = env.API_KEY.name


PARALLEL = tuple(int(n) for n in accepted("n_parallel"))  # as LoadOptions.n_parallel declares it
# Each number serve takes beyond the load options has its range on its flag (options.within). Issue 56 E17, E20: --port
# 70000 was an OverflowError after the load; --keep-responses-days nan, --ttl nan and --head-timeout inf were taken;
# --keep-responses 1e20 and --keep-responses-mb 1e300 were taken and made every stored response a 500 (past SQLite's
# 64-bit integers), hence the highest values, far beyond any real need.


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the model over an OpenAI- and Anthropic-compatible HTTP API",
                       description="Load a model and serve it at http://HOST:PORT/v1 for any OpenAI client "
                       "(and /v1/messages for Anthropic's). Binds 127.0.0.1 unless told otherwise; another "
                       "address needs an API key.")
    add_load_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this computer only)")
    p.add_argument("--port", type=int, default=8080, help="port, 0 to 65535 (default 8080; 0 picks a free one)",
                   **within(0, 65535, takes="a port from 0 to 65535 (0 picks a free one)"))
    p.add_argument("--ollama-port", type=int, default=None, metavar="PORT",
                   help="also listen on PORT (Ollama's is 11434), where apps that speak only Ollama's API look for "
                        "it; every port serves every API (OpenAI, Anthropic, Ollama)",
                   **within(0, 65535, takes="a port from 0 to 65535"))
    p.add_argument("--api-key", metavar="KEY", default=env.API_KEY.get(),
                   help=f"require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (default: ${API_KEY_ENV})")
    p.add_argument("--strict-fields", action="store_true",
                   help="refuse a request field Hearth does not know with a 400 (default: leave it out and name it "
                        "in the Hearth-Ignored-Fields header, so a newer client keeps working)")
    p.add_argument("--strict-models", action="store_true",
                   help="answer OpenAI's fixed model names (gpt-4o-mini, text-embedding-3-small, ...) with a 404 "
                        "(default: the loaded model of that kind answers, and the response's model says which)")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="answer up to N requests at once, decoded together in one batch (default 1)",
                   **within(*PARALLEL, takes="{} to {} requests at once".format(*PARALLEL)))
    p.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                   help="allow browser pages from ORIGIN to call the API (repeatable; * for any)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="also answer requests addressed to NAME (repeatable). Without a key on loopback, only "
                        "localhost, 127.0.0.1 and [::1] are answered, so that no web page can reach the API "
                        "through DNS rebinding; with a key or another --host, any name unless this limits it")
    p.add_argument("--max-models", type=int, default=1, metavar="N",
                   help="models loaded at once; a request naming another library model loads it (default 1)",
                   **at_least(1, "models"))
    p.add_argument("--ttl", type=float, default=None, metavar="SECONDS",
                   help="unload a model no request has used for this long (default: keep it)",
                   **SECONDS)
    # The API's limits (app/server/edge/limits.py's Limits, not imported here: no CLI start may import the server);
    # None takes its default, which the help says (tests/server/edge/test_limits_cli.py holds the two together).
    p.add_argument("--head-timeout", type=float, default=None, metavar="SECONDS",
                   help="close a connection whose request line and headers take longer than this; 408 (default 10)",
                   **SECONDS)
    p.add_argument("--body-timeout", type=float, default=None, metavar="SECONDS",
                   help="refuse a request whose body takes longer than this to arrive; 408 (default 60)",
                   **SECONDS)
    p.add_argument("--send-timeout", type=float, default=None, metavar="SECONDS",
                   help="drop a client that takes none of its answer for this long (a stream left unread with "
                        "its connection open), freeing its slot (default 15)",
                   **SECONDS)
    p.add_argument("--max-body-mb", type=float, default=None, metavar="MB",
                   help="refuse a request body larger than this; 413 (default 10)",
                   **within(0, above=True, takes="a number of megabytes more than 0"))
    p.add_argument("--max-connections", type=int, default=None, metavar="N",
                   help="open connections at most; beyond, a 503 with Retry-After (default 256)",
                   **at_least(1, "connections"))
    p.add_argument("--max-queue", type=int, default=None, metavar="N",
                   help="requests waiting for a slot at most, beyond the --parallel answering; beyond, a 503 with "
                        "Retry-After (default 128)", **at_least(0, "waiting requests"))
    p.add_argument("--reasoning-format", choices=("auto", "none"), default="auto",
                   help="auto: a reasoning model's <think>...</think> comes back as reasoning_content, apart from "
                        "content; none: it stays in content (a request's own reasoning_format wins; default auto)")
    p.add_argument("--tools", nargs="+", default=[], metavar="NAME",
                   help="offer these MCP servers (hearth tools list) to API clients, as {\"type\": \"mcp\", "
                        "\"server_label\": NAME} tools of /v1/responses; only the tools you allowed for good run "
                        "(off by default)")
    p.add_argument("--tools-in-chat", action="store_true",
                   help="offer the --tools servers in /v1/chat/completions too, as the same {\"type\": \"mcp\"} "
                        "tools; the calls the server ran come back under the message's mcp_calls")
    p.add_argument("--keep-responses", type=int, default=10_000, metavar="N",
                   help="stored responses kept for previous_response_id and GET /v1/responses/ID, oldest let go "
                        "first (default 10000; 0 keeps none)", **within(0, 10**9, takes="0 to 1,000,000,000 responses"))
    p.add_argument("--keep-responses-days", type=float, default=30.0, metavar="DAYS",
                   help="how long a stored response is kept (default 30, as OpenAI keeps them)",
                   **within(0, 36_500, above=True,
                            takes="a number of days more than 0 and at most 36,500 (a hundred years)"))
    # Its default is app/server/responses/store.py's DEFAULT_MAX_BYTES (tests/server/edge/test_limits_cli.py holds
    # the two together): no CLI start may import the server.
    p.add_argument("--keep-responses-mb", type=float, default=None, metavar="MB",
                   help="disk the stored responses of this server may take, oldest let go first; each server on "
                        "the same data folder keeps its own (default 256)",
                   **within(0, 10**9, above=True, takes="a number of megabytes more than 0 and at most 1,000,000,000"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from app.server.api_tools import check_tools
    from app.server.run import ServeOptions, serve

    options = replace(load_options(args), n_parallel=args.parallel)
    check_model_file(options.model_path)
    limits = _limits(args)
    check_tools(list(args.tools), args.tools_in_chat)
    return serve(options, ServeOptions(host=args.host, port=args.port, ollama_port=args.ollama_port,
                                       api_key=args.api_key, cors=list(args.cors),
                                       allowed_hosts=list(args.allowed_host), max_models=args.max_models, ttl_s=args.ttl,
                                       limits=limits, reasoning_format=args.reasoning_format,
                                       keep_responses=args.keep_responses,
                                       keep_responses_days=args.keep_responses_days,
                                       **_kept_bytes(args),
                                       tools=list(args.tools), tools_in_chat=args.tools_in_chat,
                                       strict_fields=args.strict_fields, strict_models=args.strict_models))




def _kept_bytes(args: argparse.Namespace) -> dict:
    """ServeOptions' keep_responses_bytes where --keep-responses-mb gives it (else the server's default)."""
    return {} if args.keep_responses_mb is None else {"keep_responses_bytes": int(args.keep_responses_mb * 2**20)}


def _limits(args: argparse.Namespace):
    """The API's limits from their flags (their flags have checked them); a flag not given takes its default."""
    from app.server.edge.limits import Limits

    given = {"head_timeout_s": args.head_timeout, "body_timeout_s": args.body_timeout,
             "send_timeout_s": args.send_timeout,
             "max_body_bytes": None if args.max_body_mb is None else max(1, int(args.max_body_mb * 2**20)),
             "max_connections": args.max_connections, "max_queue": args.max_queue}
    return Limits(**{name: value for name, value in given.items() if value is not None})
