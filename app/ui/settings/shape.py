"""The settings file's shape, declared once: every key the window keeps, its type, its allowed values and its
format version, with the migrations that bring an older file up to date.

The file is the user's to edit, so the store (app/ui/settings/store.py) checks it against this shape and keeps
aside what does not fit; the window's pages then read their keys as declared here instead of each checking
types of its own. A load or sampling entry is a plain object here: its fields are declared by LoadOptions and
SamplingOptions (app/protocol/messages.py), which keep a field of the wrong type at its default and say so.
Keys this Hearth does not know pass through untouched (a newer Hearth's, or the user's own).
"""

from __future__ import annotations

from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# The format of settings.json. 0: written before the file had a version (Hearth before 2026-12).
VERSION = 1
VERSION_KEY = "version"
THEMES = ("system", "light", "dark")


class _Part(BaseModel):
    # strict: "true" is not a bool, 1 is not a str; a user's hand edit is kept aside, never guessed at.
    model_config = ConfigDict(strict=True, extra="allow")


class Connection(_Part):
    """A server the user connected to (its key lives in the keyring, never here)."""

    url: str
    model: str | None = None


class ServerSettings(_Part):
    """The Server page's last start that worked."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    cors: list[str] = []
    offer_tools: bool = False
    tools_in_chat: bool = False
    tools: list[str] = []


class Settings(_Part):
    version: int = Field(VERSION, ge=0)
    # The last load (the model started with), and each model's last load by its path.
    load_options: dict[str, Any] | None = None
    model_load_options: dict[str, dict[str, Any]] = {}
    # The default load options the user set that differ from Hearth's (Settings).
    load_defaults: dict[str, Any] = {}
    sampling: dict[str, Any] | None = None
    window_geometry: str | None = None  # Qt's saveGeometry/saveState, base64
    window_state: str | None = None
    imported_models: list[str] = []
    enter_sends: bool = True
    theme: Literal["system", "light", "dark"] = "system"
    reuse_answer_drafts: bool = True
    # Simple or full (app/ui/shell/window_mode.py); none: not chosen yet, so the first start offers it.
    window_mode: Literal["simple", "full"] | None = None
    connections: list[Connection] = []
    server: ServerSettings | None = None


def wrong_keys(data: dict) -> list[str]:
    """The keys of data whose values do not fit their declaration, in the file's order."""
    try:
        Settings.model_validate(data)
    except ValidationError as exc:
        wrong = {error["loc"][0] for error in exc.errors() if error["loc"]}
        return [key for key in data if key in wrong]
    return []


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
    value = data.get(VERSION_KEY, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


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
    return Settings.model_fields[key].get_default(call_default_factory=True)
