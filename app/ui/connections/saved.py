"""The servers a user has connected to, in the settings file: addresses and models only.

Their API keys are never written here; app.core.api_keys keeps them in the system keyring.
"""

from __future__ import annotations

from app.ui.settings import shape

SETTINGS_KEY = "connections"


def saved_connections(settings: dict) -> list[dict]:
    """[{"url": ..., "model": ... or None}], the most recently used first."""
    return [{"url": e["url"], "model": e.get("model")} for e in shape.value(settings, SETTINGS_KEY)]


def remember_connection(settings: dict, url: str, model: str | None = None) -> None:
    """Put url first; a model of None keeps the one remembered before."""
    entries = saved_connections(settings)
    before = next((e for e in entries if e["url"] == url), None)
    model = model if model is not None else (before or {}).get("model")
    settings[SETTINGS_KEY] = [{"url": url, "model": model}] + [e for e in entries if e["url"] != url]


def forget_connection(settings: dict, url: str) -> None:
    settings[SETTINGS_KEY] = [e for e in saved_connections(settings) if e["url"] != url]
