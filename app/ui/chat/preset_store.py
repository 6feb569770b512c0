"""System-prompt presets: named system prompts a user saves once and picks for any chat (no Qt; the window and
the CLI share them). Kept in the config folder as JSON under every store's rule (app/core/store/jsonstore.py): locked,
so that two windows saving at once lose neither preset, and a damaged file kept aside, never written over. A first start has a few to show what they are for;
they are the user's to edit or delete like any other."""

from __future__ import annotations

from pathlib import Path

from app.core import paths
from app.core.errors import HearthError
from app.core.store.jsonstore import read_json, update_json

NAME_CHARS = 60
STARTERS = [
    {"name": "Concise", "text": "Answer briefly and directly. Use a list only when the answer is one."},
    {"name": "Coding assistant", "text": "You are an expert programmer. Answer with working code in fenced "
                                         "blocks, then explain only what is not obvious from the code."},
    {"name": "Translator", "text": "Translate the user's text into English (or, if it is English, into French). "
                                   "Give only the translation."},
]


class PresetError(HearthError):
    """A preset that cannot be saved as asked (no name, no text)."""


def presets_file() -> Path:
    return paths.config_dir() / "system_prompts.json"


def _valid(data) -> list[dict] | None:
    """The presets of a file's data, or None for data that is not a presets file (then the starters show)."""
    if not isinstance(data, dict) or not isinstance(data.get("presets"), list):
        return None
    return [{"name": p["name"], "text": p["text"]} for p in data["presets"] if _sound(p)]


def _sound(preset) -> bool:
    return isinstance(preset, dict) and isinstance(preset.get("name"), str) and isinstance(preset.get("text"), str)


def _shape(data) -> bool:
    """Anything but a presets file is damage: kept aside and said, never written over (app/core/store/jsonstore.py)."""
    return _valid(data) is not None


def _sound_presets(data: dict) -> tuple[dict, list[str]]:
    """The file without the presets that are not a name and a text (jsonstore's clean: kept aside and said,
    where they were once left out silently and lost at the next save)."""
    wrong = [p for p in data["presets"] if not _sound(p)]
    named = [str(p.get("name"))[:40] if isinstance(p, dict) else type(p).__name__ for p in wrong]
    return {**data, "presets": [p for p in data["presets"] if _sound(p)]}, [f"the preset {n!r}" for n in named]


def load_presets(path: Path | None = None) -> list[dict]:
    """[{name, text}] in the user's order; the starters until the user has saved or deleted one."""
    found = _valid(read_json(path or presets_file(), valid=_shape, clean=_sound_presets))
    return [dict(p) for p in STARTERS] if found is None else found


def save_preset(name: str, text: str, path: Path | None = None) -> list[dict]:
    """Add a preset, or replace the text of the one of that name (names are matched without regard to case)."""
    name = " ".join(name.split())[:NAME_CHARS]
    if not name:
        raise PresetError("A preset needs a name.")
    if not text.strip():
        raise PresetError("The system prompt is empty: write it in the box first, then save it as a preset.")

    def change(data):
        presets = _valid(data)
        presets = [dict(p) for p in STARTERS] if presets is None else presets
        for preset in presets:
            if preset["name"].casefold() == name.casefold():
                preset["text"] = text
                break
        else:
            presets.append({"name": name, "text": text})
        return {"presets": presets}

    return update_json(path or presets_file(), change, valid=_shape, clean=_sound_presets)["presets"]


def delete_preset(name: str, path: Path | None = None) -> list[dict]:
    def change(data):
        presets = _valid(data)
        presets = [dict(p) for p in STARTERS] if presets is None else presets
        return {"presets": [p for p in presets if p["name"].casefold() != name.casefold()]}

    return update_json(path or presets_file(), change, valid=_shape, clean=_sound_presets)["presets"]


def find_preset(text: str, presets: list[dict]) -> str | None:
    """The name of the preset whose text this is (surrounding spaces aside), else None."""
    stripped = text.strip()
    return next((p["name"] for p in presets if p["text"].strip() == stripped), None) if stripped else None
