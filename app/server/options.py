"""What a server is started with: `hearth serve`'s flags and the window's Server page, each option declared once.

A field carries its default and, in its metadata (app/protocol/option_spec.py's `option`), its flag, help and
range; `hearth serve` builds its flags from these declarations (app/commands/options.py's add_declared_args), a
help's "{default}" is the field's default, and the values come back as ServeOptions. Light at import (nothing
but the option declarations): the CLI reads these before anything of the server's stack loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.protocol.messages import SamplingOptions
from app.protocol.option_spec import POSITIVE_SECONDS, Bound, count, option

DEFAULT_MAX_TOKENS = 2048  # an answer's length where a request does not say
MB = 2**20


def given_with(asked: list[str], defaults: SamplingOptions) -> list[str]:
    """The settings a request gives, then those hearth serve's flags gave (defaults.given): both are the user's, so
    the model's recommended sampling replaces neither."""
    return [*asked, *(name for name in defaults.given or () if name not in asked)]


def request_defaults() -> SamplingOptions:
    """What a request leaves out, where hearth serve's flags do not say: Hearth's defaults, as on every surface,
    and a longer answer than the window's (clients that ask nothing expect whole answers)."""
    return SamplingOptions(max_tokens=DEFAULT_MAX_TOKENS)


@dataclass(frozen=True)
class Limits:
    """The API's bounds on connections and waiting requests (app/server/edge/limits.py applies them)."""

    head_timeout_s: float = option(10.0, "--head-timeout", "close a connection whose request line and headers take "
                                   "longer than this; 408 (default {default})", "SECONDS", bound=POSITIVE_SECONDS)
    body_timeout_s: float = option(60.0, "--body-timeout", "refuse a request whose body takes longer than this to "
                                   "arrive; 408 (default {default})", "SECONDS", bound=POSITIVE_SECONDS)
    # app/server/edge/guard.py: a 413 before the body is parsed
    max_body_bytes: int = option(10 * MB, "--max-body-mb", "refuse a request body larger than this; 413 "
                                 "(default {default})", "MB", scale=MB,
                                 bound=Bound(0, above=True, takes="a number of megabytes more than 0"))
    max_connections: int = option(256, "--max-connections", "open connections at most; beyond, a 503 with "
                                  "Retry-After (default {default})", "N", bound=count(1, "connections"))
    # requests waiting for a slot, beyond those answering
    max_queue: int = option(128, "--max-queue", "requests waiting for a slot at most, beyond the --parallel "
                            "answering; beyond, a 503 with Retry-After (default {default})", "N",
                            bound=count(0, "waiting requests"))
    # a client that takes none of its answer for this long is dropped
    send_timeout_s: float = option(15.0, "--send-timeout", "drop a client that takes none of its answer for this "
                                   "long (a stream left unread with its connection open), freeing its slot "
                                   "(default {default})", "SECONDS", bound=POSITIVE_SECONDS)


@dataclass
class ServeOptions:
    host: str = option("127.0.0.1", "--host", "address to listen on (default {default}: this computer only)")
    port: int = option(8080, "--port", "port, 0 to 65535 (default {default}; 0 picks a free one)",
                       bound=Bound(0, 65535, takes="a port from 0 to 65535 (0 picks a free one)"))
    # a second port, where Ollama's clients look (11434); it serves the same app
    ollama_port: int | None = option(None, "--ollama-port", "also listen on PORT (Ollama's is 11434), where apps "
                                     "that speak only Ollama's API look for it; every port serves every API "
                                     "(OpenAI, Anthropic, Ollama)", "PORT",
                                     bound=Bound(0, 65535, takes="a port from 0 to 65535"))
    # None: HEARTH_API_KEY's, where it is set (app/commands/serve.py)
    api_key: str | None = option(None, "--api-key", "require 'Authorization: Bearer KEY' or 'x-api-key: KEY' "
                                 "(default: $HEARTH_API_KEY)", "KEY")
    # a field Hearth does not know is a 400 (app/server/edge/field_policy.py)
    strict_fields: bool = option(False, "--strict-fields", "refuse a request field Hearth does not know with a 400 "
                                 "(default: leave it out and name it in the Hearth-Ignored-Fields header, so a newer "
                                 "client keeps working)")
    # OpenAI's fixed model names are a 404 instead of the loaded model
    strict_models: bool = option(False, "--strict-models", "answer OpenAI's fixed model names (gpt-4o-mini, "
                                 "text-embedding-3-small, ...) with a 404 (default: the loaded model of that kind "
                                 "answers, and the response's model says which)")
    cors: list[str] = option(flag="--cors", help="allow browser pages from ORIGIN to call the API (repeatable; * for "
                             "any)", metavar="ORIGIN", repeat=True, default_factory=list)
    # Host names answered beyond loopback's (app/server/edge/guard.py)
    allowed_hosts: list[str] = option(flag="--allowed-host", help="also answer requests addressed to NAME "
                                      "(repeatable). Without a key on loopback, only localhost, 127.0.0.1 and [::1] "
                                      "are answered, so that no web page can reach the API through DNS rebinding; "
                                      "with a key or another --host, any name unless this limits it",
                                      metavar="NAME", repeat=True, default_factory=list)
    # What a request leaves out (its temperature, top_p, max_tokens, ...): request_defaults(), with what hearth
    # serve's sampling flags (--temp, --top-p, --max-tokens, ..., the sampling options' own) set. A field the flags
    # set is given: it wins over the model's recommendation too, as llama-server's --temp does. Agents such as
    # Claude Code and Codex send no temperature, so this is where their sampling is chosen.
    sampling: SamplingOptions = field(default_factory=request_defaults)
    # loaded at once; a request naming another library model loads it (app/server/models.py)
    max_models: int = option(1, "--max-models", "models loaded at once; a request naming another library model "
                             "loads it (default {default})", "N", bound=count(1, "models"))
    ttl_s: float | None = option(None, "--ttl", "unload a model no request has used for this long (default: keep "
                                 "it)", "SECONDS", bound=POSITIVE_SECONDS)
    # head and body deadlines, connections, queue (app/server/edge/limits.py)
    limits: Limits = field(default_factory=Limits)
    # "none": a reasoning model's <think>... stays in content (a request may say)
    reasoning_format: str = option("auto", "--reasoning-format", "auto: a reasoning model's <think>...</think> "
                                   "comes back as reasoning_content, apart from content; none: it stays in content "
                                   "(a request's own reasoning_format wins; default {default})",
                                   choices=("auto", "none"))
    # MCP servers offered to API clients (app/server/api_tools.py)
    tools: list[str] = option(flag="--tools", help="offer these MCP servers (hearth tools list) to API clients, as "
                              "{\"type\": \"mcp\", \"server_label\": NAME} tools of /v1/responses; only the tools "
                              "you allowed for good run (off by default)", metavar="NAME", nargs="+",
                              default_factory=list)
    # ... through /v1/chat/completions too, not only /v1/responses
    tools_in_chat: bool = option(False, "--tools-in-chat", "offer the --tools servers in /v1/chat/completions too, "
                                 "as the same {\"type\": \"mcp\"} tools; the calls the server ran come back under "
                                 "the message's mcp_calls")
    # /v1/responses' store: responses kept, for how long, and the bytes this server's may take
    # (app/server/responses/store.py). Issue 56 E17, E20: --keep-responses 1e20 and --keep-responses-mb 1e300 were
    # taken and made every stored response a 500 (past SQLite's 64-bit integers), hence the highest values, far
    # beyond any real need.
    keep_responses: int = option(10_000, "--keep-responses", "stored responses kept for previous_response_id and "
                                 "GET /v1/responses/ID, oldest let go first (default {default}; 0 keeps none)", "N",
                                 bound=Bound(0, 10**9, takes="0 to 1,000,000,000 responses"))
    keep_responses_days: float = option(30.0, "--keep-responses-days", "how long a stored response is kept "
                                        "(default {default}, as OpenAI keeps them)", "DAYS",
                                        bound=Bound(0, 36_500, above=True, takes="a number of days more than 0 and "
                                                    "at most 36,500 (a hundred years)"))
    keep_responses_bytes: int = option(256 * MB, "--keep-responses-mb", "disk the stored responses of this server "
                                       "may take, oldest let go first; each server on the same data folder keeps "
                                       "its own (default {default})", "MB", scale=MB,
                                       bound=Bound(0, 10**9, above=True, takes="a number of megabytes more than 0 "
                                                   "and at most 1,000,000,000"))
