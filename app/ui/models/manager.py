"""What the Models page asks of the headless model manager (app.core library/hub/fit/quantize).

These functions block (disk, network); the page calls them through
app.ui.worker.Tasks. Parts of the manager that are not installed yet make the
matching feature report itself unavailable instead of failing.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from app.core import paths
from app.core.bundled import BUNDLED_NAME, bundled_model_path
from app.core.errors import HearthError


def available(module: str) -> bool:
    return importlib.util.find_spec(f"app.core.{module}") is not None


def _core(module: str):
    if not available(module):
        raise HearthError(f"This part of the model manager (app.core.{module}) is not installed yet.")
    return importlib.import_module(f"app.core.{module}")


def _as_dict(entry) -> dict:
    if isinstance(entry, dict):
        return dict(entry)
    if hasattr(entry, "to_dict"):
        return entry.to_dict()
    return dict(vars(entry))


def list_models(extra_paths: list[str] = ()) -> list[dict]:
    """[{name, path, size_bytes, quant, source}] for the library (or a folder scan without it)."""
    if available("library"):
        lib = _core("library")
        for fn_name in ("list_models", "scan", "library"):
            fn = getattr(lib, fn_name, None)
            if callable(fn):
                return [_normalize(_as_dict(e)) for e in fn()]
    models = []
    try:
        bundled = bundled_model_path()
        models.append({"name": BUNDLED_NAME, "path": str(bundled), "size_bytes": bundled.stat().st_size,
                       "quant": "Q4_1", "source": "bundled"})
    except (HearthError, OSError):
        pass
    seen = {m["path"] for m in models}
    for path in [*sorted(paths.models_dir().glob("*.gguf")), *map(Path, extra_paths)]:
        if str(path) in seen or not path.is_file():
            continue
        seen.add(str(path))
        models.append({"name": path.stem, "path": str(path), "size_bytes": path.stat().st_size,
                       "quant": _quant_from_name(path.name), "source": "Hearth" if path.parent == paths.models_dir()
                       else "imported"})
    return models


def _quant_from_name(name: str) -> str:
    from app.core.gguf_info import quant_from_filename

    return quant_from_filename(name) or "?"


def _normalize(entry: dict) -> dict:
    entry.setdefault("name", Path(entry.get("path", "")).stem)
    entry.setdefault("size_bytes", entry.get("size", 0))
    entry["quant"] = entry.get("quantization") or entry.get("quant") or entry.get("file_type") or "?"
    entry.setdefault("source", entry.get("origin", ""))
    return entry


def inspect(path: str) -> dict:
    from app.core.gguf_info import read_gguf_info

    return read_gguf_info(path).to_dict()


def fit(path: str, n_ctx: int, kv_type: str) -> dict | None:
    """The memory-fit verdict, or None while app.core.fit is not installed."""
    if not available("fit"):
        return None
    mod = _core("fit")
    for fn_name in ("estimate_fit", "fit", "estimate"):
        fn = getattr(mod, fn_name, None)
        if callable(fn):
            return _as_dict(fn(path, n_ctx=n_ctx, kv_type=kv_type))
    return None


def import_model(path: str) -> dict | None:
    """Add a GGUF file to the library (linked, not copied); None while the library is not installed."""
    if not available("library"):
        return None
    return _normalize(_as_dict(_core("library").import_model(path, mode="link")))


def remove_model(path: str) -> None:
    _core("library").remove_model(path)
