"""User settings in one JSON file under the config folder.

The file is the user's to edit, so it is read with suspicion: a value of the wrong type is left out (that
setting falls back to its default) instead of stopping the window, and a file that had to be corrected is
kept beside it first, as settings.json.bad-<time>, so nothing the user wrote is lost. What was wrong is in
`problems()` for the window to say.
"""

from __future__ import annotations

import json
import shutil
import time
from typing import Any

from app.core import paths
from app.core.jsonstore import write_json

# The settings the app itself keeps, and the JSON type each must have. Others pass through unchecked.
# load_options: the last load (the model started with); model_load_options: {model path: its last load};
# load_defaults: the default load options the user set that differ from Hearth's (Settings).
TYPES: dict[str, type] = {"load_options": dict, "sampling": dict, "window_geometry": str, "window_state": str,
                          "imported_models": list, "enter_sends": bool, "theme": str, "load_defaults": dict,
                          "model_load_options": dict}
THEMES = ("system", "light", "dark")

_problems: list[str] = []


def problems() -> list[str]:
    """What the last load_settings() found wrong and left out, in words."""
    return list(_problems)


def load_settings() -> dict[str, Any]:
    _problems.clear()
    path = paths.settings_file()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        _problems.append(f"the settings file {path} could not be read ({exc}); defaults are used")
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        _problems.append(f"{path.name} is not a settings file any more; defaults are used "
                         f"(the old file is kept as {_keep_aside(path).name})")
        return {}
    wrong = [key for key, kind in TYPES.items() if key in data and not isinstance(data[key], kind)]
    if isinstance(data.get("imported_models"), list) and not all(isinstance(p, str) for p in data["imported_models"]):
        wrong.append("imported_models")
    if wrong:
        kept = _keep_aside(path)
        _problems.append(f"{', '.join(wrong)} in {path.name} had values of the wrong type and were reset "
                         f"(the file as it was is kept as {kept.name})")
        for key in wrong:
            del data[key]
    return data


def _keep_aside(path):
    target = path.with_name(f"{path.name}.bad-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        shutil.copy2(path, target)
    except OSError:
        pass  # a disk that cannot take the copy: the settings are still read as well as they can be
    return target


def save_settings(settings: dict[str, Any]) -> None:
    write_json(paths.settings_file(), settings)


def update_settings(**changes: Any) -> dict[str, Any]:
    settings = load_settings()
    settings.update(changes)
    save_settings(settings)
    return settings
