"""A model's name as the library shows it, with its type: what every label in the window calls a model.

GGUF's general.name is no use for telling models apart (the bundled Q4_1, a Q4_0 made from it and a broken
copy all say "Smollm2 135M 8k Lc100K Mix1 Ep2"), so labels name the file as the library lists it.
"""

from __future__ import annotations

from pathlib import Path


def row_title(row: dict) -> str:
    """"name · type" for a library row; the type is left out where the name already says it."""
    name = row.get("name") or Path(row.get("path", "")).name
    quant = row.get("quant") or row.get("quantization")
    title = f"{name} · {quant}" if quant and quant != "?" and quant not in name else name
    return f"{title} (file missing)" if row.get("missing") else title  # moved away, maybe still loaded (#49.8)


def path_title(path: str | None, rows: list[dict]) -> str:
    """The library's title for a file; its file name until the library has been read."""
    if not path:
        return ""
    for row in rows:
        if row.get("path") == path:
            return row_title(row)
    try:
        from app.core.library.bundled import BUNDLED_NAME, bundled_model_path

        if Path(path) == bundled_model_path():
            return BUNDLED_NAME
    except Exception:  # noqa: BLE001 - no bundled model: the file name serves
        pass
    return Path(path).name


def info_title(info: dict | None, rows: list[dict]) -> str:
    """A `loaded` event's model: the library title when local, the server's own name when remote."""
    if not info:
        return ""
    if info.get("remote") or not info.get("path"):
        return info.get("name") or info.get("model", "")
    return path_title(info["path"], rows)


def model_title(info: dict | None) -> str:
    """A loaded model's name for labels (a `loaded` event), where the library's title is not at hand: a local
    model's file as the user knows it (general.name is no use: "Smollm2 135M 8k Lc100K Mix1 Ep2" for every copy
    of the bundled model; the Models page's details show it), a remote model's name on its server; "" for none."""
    return info_title(info, [])
