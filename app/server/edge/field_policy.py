"""One field policy for every dialect (#54.1), written in the API guide (docs/api.md, "Fields a request may send"):

- a field that would change the answer and cannot be done here is a 400 that names it (each reader refuses its
  own: best_of, suffix, hosted tools, ...);
- a field that carries only metadata (client_metadata, metadata, user, safety_identifier, prompt_cache_key,
  service_tier, store on chat, Anthropic's metadata, ...) is taken, and kept where the API keeps it;
- a field Hearth has never heard of is taken and left out, and named in the response's `Hearth-Ignored-Fields`
  header and once in the server log, so a client newer than Hearth keeps working (the Codex CLI sends
  `client_metadata` with every request; refusing it failed its first request). `hearth serve --strict-fields`
  makes such a field a 400 instead, for those who want to know at once.

What an endpoint knows is what its request shape declares (edge/request_shape.py, which calls `check`); the server
sets the request's strictness and sends the header.
"""

from __future__ import annotations

import contextvars
import sys
from contextlib import contextmanager
from typing import Iterator

from app.server.edge.errors import invalid

HEADER = "Hearth-Ignored-Fields"
MODEL_HEADER = "Hearth-Model"  # which model answered a fixed name a client cannot change (#54.4)
# OpenAI's and Anthropic's own model names, which clients send fixed (LangChain's OpenAIEmbeddings, `llm embed -m
# 3-small`, Claude Code): the loaded model answers them, unless the server runs with --strict-models.
FIXED_MODEL_PREFIXES = ("gpt-", "chatgpt-", "o1", "o3", "o4", "text-embedding-", "davinci", "babbage", "claude-")

_strict: contextvars.ContextVar[bool] = contextvars.ContextVar("hearth_strict_fields", default=False)
_ignored: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("hearth_ignored_fields", default=None)
_logged: set[tuple[str, str]] = set()  # (endpoint, field) said in the server log already
_answered_for: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("hearth_model_for", default=None)


def fixed_model_name(name: str | None) -> bool:
    return bool(name) and name.lower().startswith(FIXED_MODEL_PREFIXES)


def note_model(asked: str, served: str) -> None:
    """A fixed name answered by another model: said in the response's Hearth-Model header."""
    notes = _answered_for.get()
    if notes is not None:
        notes.append(f"{served} (asked for {asked})")


@contextmanager
def request_fields(strict: bool, path: str) -> Iterator[list[str]]:
    """For one request: whether unknown fields are refused, and the list of those left out (for the header)."""
    ignored: list[str] = []
    answered_for: list[str] = []
    tokens = _strict.set(strict), _ignored.set(ignored), _answered_for.set(answered_for)
    try:
        yield RequestNotes(ignored, answered_for)
    finally:
        _strict.reset(tokens[0])
        _ignored.reset(tokens[1])
        _answered_for.reset(tokens[2])
        for name in ignored:
            if (path, name) not in _logged:
                _logged.add((path, name))
                print(f"hearth: {path}: left out the field '{name}', which Hearth does not know (hearth serve "
                      "--strict-fields refuses such fields instead)", file=sys.stderr, flush=True)


def check(body: dict, known: set[str]) -> None:
    """Take a request's fields under the policy: an unknown one is left out and noted, or refused when strict."""
    unknown = sorted(name for name in body if name not in known)
    if not unknown:
        return
    if _strict.get():
        raise invalid(f"Unknown parameter: '{unknown[0]}' (this server refuses fields it does not know: it runs "
                      "with --strict-fields).", unknown[0], code="unknown_parameter")
    ignored = _ignored.get()
    if ignored is not None:
        ignored.extend(name for name in unknown if name not in ignored)


class RequestNotes:
    """What a response's headers say of its request: the fields left out, the model that answered a fixed name."""

    def __init__(self, ignored: list[str], answered_for: list[str]):
        self.ignored, self.answered_for = ignored, answered_for

    def headers(self) -> list[tuple[bytes, bytes]]:
        out = [(HEADER.lower().encode(), header_value(self.ignored))] if self.ignored else []
        if self.answered_for:
            out.append((MODEL_HEADER.lower().encode(), self.answered_for[0].encode("ascii", "backslashreplace")))
        return out


def header_value(ignored: list[str]) -> bytes:
    """The header's value: the names, comma-separated (each a JSON key the client sent; at most 40 said)."""
    names = ", ".join(ignored[:40]) + (f", and {len(ignored) - 40} more" if len(ignored) > 40 else "")
    return names.encode("ascii", "backslashreplace")
