"""`hearth tools`: the MCP servers the chat may use (mcp.json in the config folder; app/tools/servers.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError
from app.core.terminal_text import one_line
from app.tools.limits import CONNECT_TIMEOUT_S

RUNS_AS_USER = ("Its tools run as you, with your files and your network; Hearth asks before each call unless "
                "you allow a tool for good.")


def register(sub) -> None:
    p = sub.add_parser("tools", help="MCP servers whose tools the chat may use",
                       description="MCP servers whose tools the model may call in `hearth chat --tools NAME`, each "
                       # Named, not resolved: resolving makes the config folder, and every `hearth --help`
                       # (and the selftest's clean home) would leave one behind.
                       "call after you allow it. They are kept in mcp.json in Hearth's config folder (`hearth "
                       "doctor` shows it), the mcpServers file of LM Studio, Jan, Claude Desktop and Cursor.")
    own = p.add_subparsers(dest="tools_command", metavar="ACTION", required=True)

    add = own.add_parser("add", help="add a server: NAME -- COMMAND [ARGS...], or NAME --url URL",
                         description="Add an MCP server. A local one: `hearth tools add time -- uvx mcp-server-time`; "
                         "a remote one: `hearth tools add docs --url https://host/mcp --header 'Authorization: "
                         "Bearer ...'`. " + RUNS_AS_USER)
    add.add_argument("name")
    # Not REMAINDER, which took every word after NAME as the program, a mistyped option (--command) too.
    # default=[]: without a default argparse counts a nargs="*" positional as required, and `tools add --url URL`
    # (no name) was told that "name, -- COMMAND" were missing, though a remote server has no command.
    add.add_argument("command", nargs="*", default=[], metavar="-- COMMAND",
                     help="the program to start and its arguments, after --")
    add.program = ("command", "the server's command")  # grammar.Parser: an unknown option says so
    add.add_argument("--url", help="a streamable-HTTP MCP server's address")
    add.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'", help="an HTTP header (repeatable)")
    add.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="an environment variable for the server's program (repeatable)")
    add.add_argument("--replace", action="store_true", help="replace a server of the same name")
    add.set_defaults(func=run_add)

    imp = own.add_parser("import", help="add every server of another app's mcp.json",
                         description="Add the servers of an mcp.json you already have (LM Studio's, Jan's, Cursor's, "
                         "or Claude Desktop's claude_desktop_config.json). " + RUNS_AS_USER)
    imp.add_argument("file")
    imp.add_argument("--replace", action="store_true", help="replace servers of the same names")
    imp.set_defaults(func=run_import)

    ls = own.add_parser("list", help="the configured servers")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)

    rm = own.add_parser("rm", help="remove a server (and the tools allowed for it)")
    rm.add_argument("name")
    rm.set_defaults(func=run_rm)

    test = own.add_parser("test", help="start a server and list its tools with their schemas")
    test.add_argument("name")
    test.add_argument("--timeout", type=float, default=CONNECT_TIMEOUT_S,
                      help=f"seconds to wait for it (default {CONNECT_TIMEOUT_S:g})")
    test.add_argument("--json", action="store_true")
    test.set_defaults(func=run_test)


def _pairs(items: list[str], sep: str, what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, found, value = item.partition(sep)
        if not found or not key.strip():
            raise HearthError(f"{what} '{item}' must look like NAME{sep}VALUE.")
        out[key.strip()] = value.strip() if sep == ":" else value
    return out


def run_add(args: argparse.Namespace) -> int:
    from app.tools.servers import ServerEntry, save_server

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.url):
        raise HearthError("Give either a command after -- (a local server) or --url (a remote one).")
    if command:
        entry = ServerEntry(args.name, command=command[0], args=command[1:], env=_pairs(args.env, "=", "--env"))
    else:
        entry = ServerEntry(args.name, url=args.url, headers=_pairs(args.header, ":", "--header"))
    from app.tools.servers import parse_entry

    parse_entry(args.name, entry.to_json(), "the command line")  # the same checks as a file's entry
    from app.tools.server_secrets import keep_secrets

    entry, notes = keep_secrets(entry)  # API keys and tokens to the keyring; mcp.json names them
    save_server(entry, replace=args.replace)
    for note in notes:
        print(f"hearth: note: {note}", file=sys.stderr)
    print(f"Added MCP server '{args.name}' ({entry.describe()}) to {paths.mcp_config_file()}.")
    print(RUNS_AS_USER)
    import shutil

    if entry.command and shutil.which(entry.command) is None:
        print(f"hearth: note: there is no program '{entry.command}' on PATH yet; the server cannot start until "
              "there is.", file=sys.stderr)
    print(f"Check it with `hearth tools test {args.name}`; use it with `hearth chat --tools {args.name}`.")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from app.tools.servers import import_servers

    names = import_servers(Path(args.file), replace=args.replace)
    print(f"Added {len(names)} MCP server(s) from {args.file}: {', '.join(names)}.")
    print(RUNS_AS_USER)
    return 0


def _secrets(entry) -> list[dict]:
    """The stored secrets an entry uses, and whether each is its own (another server's is never resolved)."""
    from app.tools.server_secrets import owner, references

    return [{"where": where, "name": name, "keyring": account, "owner": owner(account),
             "own": owner(account) == entry.name} for where, name, account in references(entry)]


def run_list(args: argparse.Namespace) -> int:
    from app.tools.servers import allowed_tools, load_servers

    servers = load_servers()
    if args.json:
        print(json.dumps({name: {**e.to_json(), "always_allowed": sorted(allowed_tools(name)),
                                 "secrets": _secrets(e)} for name, e in servers.items()}, indent=2))
        return 0
    if not servers:
        print(f"No MCP servers yet ({paths.mcp_config_file()}). Add one with `hearth tools add NAME -- COMMAND`.")
        return 0
    for name, entry in servers.items():
        allowed = sorted(allowed_tools(name))
        flags = " (disabled)" if entry.disabled else ""
        print(f"{one_line(name)}{flags}  {entry.transport}  {one_line(entry.describe())}")
        if allowed:
            print(f"    always allowed: {', '.join(allowed)}")
        own = [f"{s['name']} ({s['where']})" for s in _secrets(entry) if s["own"]]
        if own:
            print(f"    secrets from the keyring: {', '.join(own)}")
        for s in _secrets(entry):
            if not s["own"]:
                print(f"    ! {s['name']} names the server '{s['owner']}''s secret ({s['keyring']}): never given to "
                      "this server, which does not start until it has its own")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from app.tools.servers import remove_server

    remove_server(args.name)
    print(f"Removed MCP server '{args.name}'.")
    return 0


def run_test(args: argparse.Namespace) -> int:
    from app.tools.mcp_client import McpConnection
    from app.tools.servers import get_server

    started = time.monotonic()
    with McpConnection(get_server(args.name), args.timeout) as conn:
        seconds = time.monotonic() - started
        if args.json:
            print(json.dumps({"server": args.name, "server_name": conn.server_name, "seconds": round(seconds, 3),
                              "tools": [{"name": t.name, "description": t.description, "input_schema": t.schema}
                                        for t in conn.tools]}, indent=2))
            return 0
        print(f"MCP server '{args.name}' ({conn.server_name or conn.entry.describe()}) answered in {seconds:.1f} s "
              f"with {len(conn.tools)} tool(s):")
        for tool in conn.tools:
            print(f"\n  {one_line(tool.name)}: {tool.description.strip()}")
            print("    " + json.dumps(tool.schema, ensure_ascii=False, indent=2).replace("\n", "\n    "))
    sys.stdout.flush()
    return 0
