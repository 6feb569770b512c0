"""The settings file's shape, declared once: every key the window keeps, its type, its allowed values and its
format version, with the migrations that bring an older file up to date.

The file is the user's to edit, so the store (app/ui/settings/store.py) checks it against this shape and keeps
aside what does not fit; the window's pages then read their keys as declared here instead of each checking
types of its own. A load or sampling entry is a plain object here: its fields are declared by LoadOptions and
SamplingOptions (app/protocol/messages.py), which keep a field of the wrong type at its default and say so.
Keys this Hearth does not know pass through untouched (a newer Hearth's, or the user's own).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Annotated, Any, Callable, Literal

from app.protocol.option_spec import Range, fits, hints
from app.server.options import ServeOptions
from app.ui.shell import window_mode

# The format of settings.json. 0: written before the file had a version (Hearth before 2026-12).
VERSION = 1
VERSION_KEY = "version"
THEMES = ("system", "light", "dark")
WINDOW_MODES = tuple(window_mode.MODES)


# Each part of the file is a dataclass whose fields are its keys: their types say what fits, strictly ("true" is no
# bool, 1 no str), and their defaults are what the window uses where the file has none. A part's keys this Hearth
# does not know are left as they are. (Declared without pydantic: the settings are read at every start, and the
# bundle carries pydantic only for the MCP SDK, which loads it once tools are used.)
@dataclass
class Connection:
    """A server the user connected to (its key lives in the keyring, never here)."""

    url: str
    model: str | None = None


@dataclass
class ServerSettings:
    """The Server page's last start that worked."""

    host: str = ServeOptions.host
    port: Annotated[int, Range(1, 65535)] = ServeOptions.port
    cors: list[str] = field(default_factory=list)
    offer_tools: bool = False
    tools_in_chat: bool = False
    tools: list[str] = field(default_factory=list)


@dataclass
class Settings:
    version: Annotated[int, Range(0, 1 << 31)] = VERSION
    # The last load (the model started with), and each model's last load by its path.
    load_options: dict[str, Any] | None = None
    model_load_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The default load options the user set that differ from Hearth's (Settings).
    load_defaults: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] | None = None
    window_geometry: str | None = None  # Qt's saveGeometry/saveState, base64
    window_state: str | None = None
    imported_models: list[str] = field(default_factory=list)
    enter_sends: bool = True
    theme: Literal[THEMES] = "system"
    reuse_answer_drafts: bool = True
    # Simple or full (app/ui/shell/window_mode.py); none: not chosen yet, so the first start offers it.
    window_mode: Literal[WINDOW_MODES] | None = None
    connections: list[Connection] = field(default_factory=list)
    server: ServerSettings | None = None


def wrong_keys(data: dict) -> list[str]:
    """The keys of data whose values do not fit their declaration, in the file's order."""
    declared = hints(Settings)
    return [key for key, value in data.items() if key in declared and not fits(declared[key], value)]


def _from_unversioned(data: dict) -> dict:
    """0 -> 1: the window became simple by default (#55). Someone whose window has been opened before (it kept
    its geometry) had the full one and chose nothing: they keep it, instead of meeting a first start's offer."""
    if "window_geometry" in data and "window_mode" not in data:
        return {**data, "window_mode": "full"}
    return data


# MIGRATIONS[n] turns a file of format n into format n + 1.
MIGRATIONS: dict[int, Callable[[dict], dict]] = {0: _from_unversioned}
assert sorted(MIGRATIONS) == list(range(VERSION)), "one migration per format before this one"


def version_of(data: dict) -> int:
    """The file's format: 0 where it says none (or says it wrongly, which the load then says)."""
    value = data.get(VERSION_KEY, 0)
    return value if fits(hints(Settings)[VERSION_KEY], value) else 0


def migrated(data: dict) -> dict:
    """data brought to this format (a newer one is left as it is: this Hearth reads what it knows of it)."""
    version = version_of(data)
    if version >= VERSION:
        return data
    for step in range(version, VERSION):
        data = MIGRATIONS[step](data)
    return {**data, VERSION_KEY: VERSION}


def value(settings: dict, key: str) -> Any:
    """A setting as the window uses it: the file's value (checked on load), else its declared default."""
    if key in settings:
        return settings[key]
    declared = next(f for f in fields(Settings) if f.name == key)
    return declared.default_factory() if declared.default_factory is not MISSING else declared.default
