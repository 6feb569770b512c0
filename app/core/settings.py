"""User settings in one JSON file under the config folder."""

from __future__ import annotations

from typing import Any

from app.core import paths
from app.core.jsonstore import read_json, write_json


def load_settings() -> dict[str, Any]:
    data = read_json(paths.settings_file(), {})
    return data if isinstance(data, dict) else {}


def save_settings(settings: dict[str, Any]) -> None:
    write_json(paths.settings_file(), settings)


def update_settings(**changes: Any) -> dict[str, Any]:
    settings = load_settings()
    settings.update(changes)
    save_settings(settings)
    return settings
