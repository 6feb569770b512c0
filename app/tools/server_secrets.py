"""Secrets in a server's env or headers (an API key, a token, an Authorization header) kept in the system
keyring, as the remote servers' API keys are (app/core/api_keys.py), not as text in mcp.json.

mcp.json then holds a reference in the value's place, `${keyring:SERVER/env/NAME}`, which the connection
resolves when it starts the server (app/tools/mcp_client.py). A literal value, as other apps' files have them,
still works as it is. Where no keyring can store the value, it stays in mcp.json as written (as LM Studio,
Claude Desktop and Cursor keep it) and the caller gets one sentence saying so: a reference the next start
could not resolve would lose the server.
"""

from __future__ import annotations

import re
from dataclasses import replace

from app.core.api_keys import KeyStore
from app.tools.servers import ServerEntry, ToolsConfigError

SERVICE = "Hearth MCP servers"
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "AUTH", "CREDENTIAL")
REFERENCE = re.compile(r"^\$\{keyring:([^}]+)\}$")

_keys = KeyStore(SERVICE)  # one per process: a value kept for the session only is found again by the next start


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def is_reference(value: str) -> bool:
    return bool(REFERENCE.match(value or ""))


def _account(server: str, where: str, name: str) -> str:
    return f"{server}/{where}/{name}"


def keep_secrets(entry: ServerEntry) -> tuple[ServerEntry, list[str]]:
    """The entry as mcp.json should keep it (its secret values replaced by keyring references), and a sentence
    for each value that could not go to the keyring (then kept as it was)."""
    notes: list[str] = []

    def kept(values: dict[str, str], where: str) -> dict[str, str]:
        out = {}
        for name, value in values.items():
            if not looks_secret(name) or not value or is_reference(value):
                out[name] = value
                continue
            account = _account(entry.name, where, name)
            why = _keys.save(account, value)
            if why is None:
                out[name] = f"${{keyring:{account}}}"
            else:
                out[name] = value
                notes.append(f"{name}: {why.split(', so ')[0]}, so it stays in mcp.json as written.")
        return out

    return replace(entry, env=kept(entry.env, "env"), headers=kept(entry.headers, "headers")), notes


def resolved(entry: ServerEntry) -> ServerEntry:
    """The entry with its keyring references replaced by their values; ToolsConfigError names one not found."""

    def values(items: dict[str, str]) -> dict[str, str]:
        out = {}
        for name, value in items.items():
            found = REFERENCE.match(value or "")
            if found is None:
                out[name] = value
                continue
            secret = _keys.get(found.group(1))
            if secret is None:
                raise ToolsConfigError(f"MCP server '{entry.name}': the value of {name} is kept in the keyring "
                                       f"({found.group(1)}), and the keyring does not have it; add the server "
                                       "again with its value (the Tools page, or hearth tools add --replace).")
            out[name] = secret
        return out

    return replace(entry, env=values(entry.env), headers=values(entry.headers))


def forget_secrets(entry: ServerEntry) -> None:
    """The keyring's copies of a removed server's secrets go with it."""
    for where, items in (("env", entry.env), ("headers", entry.headers)):
        for value in items.values():
            found = REFERENCE.match(value or "")
            if found is not None:
                _keys.forget(found.group(1))
