"""Each file's metadata (architecture, parameters, quantization, context), read from its GGUF header and cached
by (path, size, mtime), so listing a library of big models stays quick."""

from __future__ import annotations

from pathlib import Path

from app.core import paths
from app.core.errors import ModelFileError
from app.core.gguf.info import read_gguf_info
from app.core.library.index import _wrong_type


def _cache_file() -> Path:
    return paths.cache_dir() / "gguf_meta.json"


def _metadata(path: Path, cache: dict) -> dict:
    try:
        st = path.stat()
    except OSError as exc:
        return {"error": f"Cannot read {path}: {exc.strerror or exc}."}
    key = str(path)
    stamp = [st.st_size, st.st_mtime_ns]
    hit = cache.get(key)
    if _sound_cached(hit) and hit.get("stamp") == stamp:
        return hit
    try:
        info = read_gguf_info(path)
        meta = {"architecture": info.architecture, "parameters": info.parameters,
                "quantization": info.file_type, "context_length": info.context_length, "name": info.name}
    except ModelFileError as exc:
        meta = {"error": str(exc)}
    meta["stamp"] = stamp
    cache[key] = meta
    return meta


# What a cached entry's fields must be: the cache is rebuilt by itself, so an entry of another shape is read
# again from its file, never handed on (a "parameters" that is text crashed the listing's arithmetic).
_CACHED_FIELDS = {"architecture": str, "parameters": int, "quantization": str, "context_length": int, "name": str,
                  "error": str}


def _sound_cached(hit) -> bool:
    return isinstance(hit, dict) and all(hit.get(key) is None or not _wrong_type(hit[key], kind)
                                         for key, kind in _CACHED_FIELDS.items())
