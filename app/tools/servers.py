"""The MCP servers the user configured: `mcp.json` in Hearth's config folder, in the format LM Studio, Jan,
Claude Desktop and Cursor share, so a file from one of them can be copied in as it is:

    {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
                    "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}}}}

A server with `command` is started as a child process and spoken to over stdio; one with `url` is reached over
streamable HTTP. Keys Hearth does not use are kept when the file is written back, so the same file still works
in the app it came from. A broken file is one sentence (ToolsConfigError), never a traceback, and never
silently treated as empty: writing to it would lose the user's servers.
"""

from __future__ import annotations

import re
from pathlib import Path

from app.core import paths
from app.core.store.bounded_read import Budget, TooBig, load_json, read_file
from app.core.store.jsonstore import locked, read_json, update_json, write_json
from app.tools.server_entry import ServerEntry, ToolsConfigError  # noqa: F401 (theirs, by this name too)

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,48}$")
MAX_CONFIG_BYTES = 16 * 2**20  # a file of servers is a few KB; 16 MB is something else
HTTP_TYPES = ("http", "streamable-http", "streamableHttp", "streamable_http")


def _strings(value, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                              for k, v in value.items()):
        raise ToolsConfigError(f"{what} must be an object of names to text values.")
    return {k: str(v) for k, v in value.items()}


def parse_entry(name: str, raw, where: str = "mcp.json") -> ServerEntry:
    """One `mcpServers` entry, checked; ToolsConfigError with one sentence when it cannot be used."""
    at = f"{where}: server '{name}'"
    if not NAME.match(name):
        raise ToolsConfigError(f"{at}: a server's name must be 1-48 letters, digits, '_', '.' or '-'.")
    if not isinstance(raw, dict):
        raise ToolsConfigError(f"{at} must be an object with a 'command' or a 'url'.")
    kind = raw.get("type") or raw.get("transport")
    disabled = bool(raw.get("disabled", False))
    if raw.get("command") is not None:
        command, args = raw["command"], raw.get("args", [])
        if not isinstance(command, str) or not command.strip():
            raise ToolsConfigError(f"{at}: 'command' must be the program to start.")
        if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
            raise ToolsConfigError(f"{at}: 'args' must be a list of text arguments.")
        return ServerEntry(name, command=command, args=[str(a) for a in args],
                           env=_strings(raw.get("env"), f"{at}: 'env'"), disabled=disabled)
    if raw.get("url") is not None:
        url = raw["url"]
        if not isinstance(url, str) or not re.match(r"^https?://", url):
            raise ToolsConfigError(f"{at}: 'url' must be an http:// or https:// address.")
        if kind == "sse":
            raise ToolsConfigError(f"{at} uses the old SSE transport; Hearth speaks streamable HTTP, which current "
                                   "servers offer (often at the same address ending in /mcp).")
        if kind is not None and kind not in HTTP_TYPES:
            raise ToolsConfigError(f"{at}: type '{kind}' is not one Hearth knows (stdio with 'command', or http).")
        return ServerEntry(name, url=url, headers=_strings(raw.get("headers"), f"{at}: 'headers'"), disabled=disabled)
    raise ToolsConfigError(f"{at} has neither a 'command' (a program to start) nor a 'url'.")


def _read_file(path: Path) -> dict:
    """The whole file as it is (other apps' keys included); {} when there is none yet."""
    if not path.exists():
        return {}
    try:
        # Counted as it is read and refused when nested past reason (app/core/store/bounded_read.py): the file to
        # import may be anyone's.
        raw = read_file(path, Budget(str(path), MAX_CONFIG_BYTES))
        data = load_json(raw.decode("utf-8"), str(path))
    except TooBig as exc:  # its own sentence: too big, or nested too deep
        raise ToolsConfigError(str(exc)) from None
    except UnicodeDecodeError:
        raise ToolsConfigError(f"{path} is not UTF-8 text.") from None
    except ValueError as exc:
        raise ToolsConfigError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                               "fix it or remove it.") from None
    except OSError as exc:
        raise ToolsConfigError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    servers = data.get("mcpServers", {}) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ToolsConfigError(f"{path} must be an object with \"mcpServers\": {{name: server, ...}}.")
    return data


def load_servers(path: Path | None = None) -> dict[str, ServerEntry]:
    path = path or paths.mcp_config_file()
    raw = _read_file(path).get("mcpServers", {})
    return {name: parse_entry(name, entry, str(path)) for name, entry in raw.items()}


def get_server(name: str, path: Path | None = None) -> ServerEntry:
    servers = load_servers(path)
    if name not in servers:
        known = ", ".join(servers) or "none yet; add one with `hearth tools add`"
        raise ToolsConfigError(f"There is no MCP server named '{name}' (configured: {known}).")
    return servers[name]


def save_server(entry: ServerEntry, path: Path | None = None, replace: bool = False) -> None:
    path = path or paths.mcp_config_file()
    with locked(path):
        data = _read_file(path)
        servers = data.setdefault("mcpServers", {})
        if entry.name in servers and not replace:
            raise ToolsConfigError(f"There is already a server named '{entry.name}'; remove it first or use --replace.")
        parse_entry(entry.name, entry.to_json())  # what is written reads back
        _refuse_borrowing([entry])
        servers[entry.name] = {**(servers.get(entry.name) or {}), **entry.to_json()}
        write_json(path, data)


def import_servers(source: Path, path: Path | None = None, replace: bool = False) -> list[str]:
    """Every server of another app's mcp.json (or claude_desktop_config.json) added here; their names."""
    incoming = _read_file(source).get("mcpServers", {})
    entries = [parse_entry(name, raw, str(source)) for name, raw in incoming.items()]
    if not entries:
        raise ToolsConfigError(f"{source} has no servers under \"mcpServers\".")
    _refuse_borrowing(entries, str(source))
    path = path or paths.mcp_config_file()
    with locked(path):
        data = _read_file(path)
        servers = data.setdefault("mcpServers", {})
        clash = [e.name for e in entries if e.name in servers and not replace]
        if clash:
            raise ToolsConfigError(f"Servers named {', '.join(clash)} are configured already; use --replace.")
        for name, raw in incoming.items():
            servers[name] = raw  # as it came, other apps' keys included
        write_json(path, data)
    return [e.name for e in entries]


def _refuse_borrowing(entries: list[ServerEntry], where: str = "") -> None:
    """No entry may name a secret stored for another server: refused whole, before anything is written."""
    from app.tools.server_secrets import borrowing, foreign_references  # it imports this module

    for entry in entries:
        if foreign_references(entry):
            raise ToolsConfigError(f"{where + ': ' if where else ''}{borrowing(entry)}, so nothing was added.")


def remove_server(name: str, path: Path | None = None) -> None:
    path = path or paths.mcp_config_file()
    with locked(path):
        data = _read_file(path)
        if name not in data.get("mcpServers", {}):
            raise ToolsConfigError(f"There is no MCP server named '{name}'.")
        raw = data["mcpServers"].pop(name)
        write_json(path, data)
    forget_permissions(name)
    try:
        entry = parse_entry(name, raw)
    except ToolsConfigError:  # a broken entry has no secrets Hearth put in the keyring
        return
    from app.tools.server_secrets import forget_secrets  # it imports this module

    forget_secrets(entry)


# The user's answers to a call (app/tools/tool_chat.py); here, beside the allow-list "always" adds to, so that the
# window's buttons know them without importing the call machinery (the grammar's llama.cpp).
ONCE, ALWAYS, DENY = "once", "always", "deny"
STOPPED = "stopped"  # the user stopped the answer (the window's Esc) while the call waited or ran

# The allow-list: {server: [tool, ...]} of tools the user allowed "always". Kept apart from mcp.json, which
# the user may copy from or to another app whose own approvals are its business.

def _permissions_shape(data) -> bool:
    """{server: [tool, ...]}; anything else is damage, kept aside and said (app/core/store/jsonstore.py)."""
    return isinstance(data, dict)


def _sound_permissions(data: dict) -> tuple[dict, list[str]]:
    """The allow-list without the servers whose list is not a list of tool names (jsonstore's clean: one such
    entry is kept aside and said, the others' permissions stay)."""
    wrong = [server for server, tools in data.items()
             if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)]
    return {k: v for k, v in data.items() if k not in wrong}, [f"the tools of '{server[:48]}'" for server in wrong]


def _read_permissions() -> dict:
    return read_json(paths.tool_permissions_file(), {}, valid=_permissions_shape, clean=_sound_permissions)


def _update_permissions(change) -> None:
    update_json(paths.tool_permissions_file(), change, {}, valid=_permissions_shape, clean=_sound_permissions)


def allowed_tools(server: str) -> set[str]:
    return set(_read_permissions().get(server, []))


def allow_always(server: str, tool: str) -> None:
    _update_permissions(lambda data: {**data, server: sorted(set(data.get(server, [])) | {tool})})


def forget_permissions(server: str) -> None:
    if server in _read_permissions():
        _update_permissions(lambda data: {k: v for k, v in data.items() if k != server})
