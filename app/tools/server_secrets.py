"""Secrets in a server's env or headers (an API key, a token, an Authorization header) kept in the system
keyring, as the remote servers' API keys are (app/core/api_keys.py), not as text in mcp.json.

mcp.json then holds a reference in the value's place, `${keyring:SERVER/env/NAME}`, which the connection
resolves when it starts the server (app/tools/mcp_client.py). A literal value, as other apps' files have them,
still works as it is. Where no keyring can store the value, it stays in mcp.json as written (as LM Studio,
Claude Desktop and Cursor keep it) and the caller gets one sentence saying so: a reference the next start
could not resolve would lose the server.

A secret belongs to the server it was stored for: its account starts with that server's name, and a reference
resolves only for that server (owner). Any file can name any account, so an imported or hand-edited mcp.json
could otherwise hand one server's token to another server's program or address, before any approval.
"""

from __future__ import annotations

import re
from dataclasses import replace

from app.core.api_keys import KeyStore
from app.tools.server_entry import ServerEntry, ToolsConfigError

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


def owner(account: str) -> str:
    """The server an account was stored for: "github/env/GITHUB_TOKEN" -> "github"."""
    return account.split("/", 1)[0]


def references(entry: ServerEntry) -> list[tuple[str, str, str]]:
    """(where, name, account) of each keyring reference in the entry's env and headers."""
    found = []
    for where, items in (("env", entry.env), ("headers", entry.headers)):
        for name, value in items.items():
            match = REFERENCE.match(value or "")
            if match is not None:
                found.append((where, name, match.group(1)))
    return found


def foreign_references(entry: ServerEntry) -> list[tuple[str, str, str]]:
    """The references that name a secret stored for another server."""
    return [ref for ref in references(entry) if owner(ref[2]) != entry.name]


def borrowing(entry: ServerEntry) -> str:
    """One sentence for an entry that names another server's secret."""
    where, name, account = foreign_references(entry)[0]
    return (f"MCP server '{entry.name}': the value of {name} names a secret stored for the server "
            f"'{owner(account)}' ({account}); a server may use only its own secrets")


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

    if foreign_references(entry):
        raise ToolsConfigError(f"{borrowing(entry)}, so Hearth does not start it; add the secret for it with "
                               f"hearth tools add {entry.name} --replace.")

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
    """The keyring's copies of a removed server's secrets go with it; another server's, which a borrowing entry
    names, stay."""
    for _, _, account in references(entry):
        if owner(account) == entry.name:
            _keys.forget(account)
