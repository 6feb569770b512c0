"""The one place that knows where Hearth keeps things.

Everything else asks this module. HEARTH_HOME overrides the platform
directories (tests point it at a temporary folder so that no test touches the
real home directory).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
from app.core import env

APP_NAME = "Hearth"


def _root_override() -> Path | None:
    value = env.HOME.get()
    return Path(value) if value else None


def _ensure(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        # A read-only or full data folder must still be read (a model listed, an index searched): the writer
        # that needs the folder says why it cannot write there (app/core/store/disk_errors.py).
        pass
    return path


def data_dir() -> Path:
    root = _root_override()
    return _ensure(root / "data" if root else Path(platformdirs.user_data_dir(APP_NAME, False)))


def config_dir() -> Path:
    root = _root_override()
    return _ensure(root / "config" if root else Path(platformdirs.user_config_dir(APP_NAME, False)))


def cache_dir() -> Path:
    root = _root_override()
    return _ensure(root / "cache" if root else Path(platformdirs.user_cache_dir(APP_NAME, False)))


def log_dir() -> Path:
    root = _root_override()
    return _ensure(root / "logs" if root else Path(platformdirs.user_log_dir(APP_NAME, False)))


def models_dir() -> Path:
    """Models that Hearth downloaded, imported, converted or quantized."""
    return _ensure(data_dir() / "models")


def chats_db() -> Path:
    return data_dir() / "chats.sqlite3"


def docs_index() -> Path:
    """The documents' index (app/docs/store.py): collections, their files' chunks, full text and vectors."""
    return data_dir() / "docs.sqlite3"


def responses_db() -> Path:
    """The API's stored responses (`POST /v1/responses` with store): app/server/responses/store.py."""
    return data_dir() / "responses.sqlite3"


def settings_file() -> Path:
    return config_dir() / "settings.json"


def server_key_file() -> Path:
    """The window's API server key where no keyring service runs, readable by the user alone (app/core/api_keys.py)."""
    return config_dir() / "server-key.json"


def mcp_config_file() -> Path:
    """The MCP servers the chat may use: `{"mcpServers": {...}}`, the file LM Studio, Jan, Claude Desktop and
    Cursor read, so a user's own can be copied in as it is."""
    return config_dir() / "mcp.json"


def tool_permissions_file() -> Path:
    """Which tools of which MCP server the user allowed for good ("always for this tool"), per server."""
    return config_dir() / "tool-permissions.json"


def machine_facts_file() -> Path:
    """What Hearth learned about this machine (for example the extra-buffer probe)."""
    return data_dir() / "machine.json"


def all_paths() -> dict[str, str]:
    return {
        "data": str(data_dir()),
        "config": str(config_dir()),
        "cache": str(cache_dir()),
        "logs": str(log_dir()),
        "models": str(models_dir()),
        "chats": str(chats_db()),
        "docs": str(docs_index()),
        "mcp": str(mcp_config_file()),
    }
