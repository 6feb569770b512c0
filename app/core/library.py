"""The local model library: what Hearth can load without downloading anything.

Sources, in the order they are listed:
- bundled: the SmolLM2 model that ships with Hearth;
- hearth: GGUF files in Hearth's models folder (downloads, quantized files);
- imported: files the user imported: copied or moved into the models folder
  (Hearth owns them), or linked, i.e. recorded where they are (Hearth does not);
- huggingface, lmstudio, gpt4all, ollama: GGUF files other apps keep on disk,
  found read-only and never copied, moved or deleted.

The index of imports is a JSON file under paths.data_dir(). Metadata of each
file is read with gguf_info and cached by (path, size, mtime), so listing a
library of big models stays quick. Discovery looks under the user's home, or
under HEARTH_DISCOVERY_HOME (tests point it at a temporary folder);
HEARTH_NO_DISCOVERY=1 turns it off.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError, ModelFileError
from app.core.gguf_info import read_gguf_info
from app.core.gguf_names import SplitPart, split_part
from app.core.jsonstore import read_json, update_json, write_json

OWNED_SOURCES = ("hearth", "imported", "quantized")
DISCOVERED_SOURCES = ("huggingface", "lmstudio", "gpt4all", "ollama")
APP_NAMES = {"huggingface": "the Hugging Face cache", "lmstudio": "LM Studio", "gpt4all": "GPT4All",
             "ollama": "Ollama", "bundled": "Hearth's installation"}
IMPORT_MODES = ("link", "copy", "move")
MAX_DEPTH = 6  # how deep discovery walks below a root


@dataclass
class LibraryEntry:
    name: str
    path: str
    size_bytes: int
    source: str  # bundled | hearth | imported | quantized | huggingface | lmstudio | gpt4all | ollama | file
    owned: bool  # Hearth may delete it
    architecture: str | None = None
    parameters: int | None = None
    quantization: str | None = None
    context_length: int | None = None
    parts: int = 1  # files in a split GGUF set
    error: str | None = None  # why the metadata could not be read

    def to_dict(self) -> dict:
        return asdict(self)


# --- index of imports ----------------------------------------------------------

def index_file() -> Path:
    return paths.data_dir() / "library.json"


def _index() -> list[dict]:
    data = read_json(index_file(), {})
    return [e for e in data.get("models", []) if isinstance(e, dict) and e.get("path")] \
        if isinstance(data, dict) else []


def _update_index(change) -> None:
    """Change the index's entries as one locked step: two processes importing at once both keep theirs."""
    def apply(data):
        entries = [e for e in data.get("models", []) if isinstance(e, dict) and e.get("path")] \
            if isinstance(data, dict) else []
        return {"models": change(entries)}

    update_json(index_file(), apply, {})


def register(path: str | Path, source: str, owned: bool) -> None:
    """Record a file outside the models folder (an import link, a quantized --out file)."""
    p = str(Path(path).resolve())
    _update_index(lambda entries: [e for e in entries if e["path"] != p]
                  + [{"path": p, "source": source, "owned": owned, "added": time.time()}])


def _forget(path: str) -> None:
    _update_index(lambda entries: [e for e in entries if e["path"] != path])


# --- metadata cache --------------------------------------------------------------

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
    if hit and hit.get("stamp") == stamp:
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


# --- discovery -----------------------------------------------------------------

def discovery_home() -> Path | None:
    value = os.environ.get("HEARTH_DISCOVERY_HOME")
    return Path(value) if value else None


def discovery_roots(home: Path | None = None) -> dict[str, list[Path]]:
    """Where other apps keep models. With `home` (or HEARTH_DISCOVERY_HOME) everything is looked up below it;
    otherwise the apps' own environment variables (HF_HUB_CACHE, HF_HOME, OLLAMA_MODELS) are honoured too."""
    explicit = home or discovery_home()
    base = explicit or Path.home()
    env = {} if explicit else os.environ
    hf = env.get("HF_HUB_CACHE") or (str(Path(env["HF_HOME"]) / "hub") if env.get("HF_HOME") else None)
    if sys.platform == "darwin":
        gpt4all = base / "Library" / "Application Support" / "nomic.ai" / "GPT4All"
    elif sys.platform.startswith("win"):
        gpt4all = base / "AppData" / "Local" / "nomic.ai" / "GPT4All"
    else:
        gpt4all = base / ".local" / "share" / "nomic.ai" / "GPT4All"
    return {
        "huggingface": [Path(hf) if hf else base / ".cache" / "huggingface" / "hub"],
        "lmstudio": [base / ".lmstudio" / "models", base / ".cache" / "lm-studio" / "models"],
        "gpt4all": [gpt4all],
        "ollama": [Path(env["OLLAMA_MODELS"]) if env.get("OLLAMA_MODELS") else base / ".ollama" / "models"],
    }


def _walk_gguf(root: Path, max_depth: int = MAX_DEPTH):
    if not root.is_dir():
        return
    root_depth = len(root.parts)
    for folder, dirs, files in os.walk(root, followlinks=False):
        if len(Path(folder).parts) - root_depth >= max_depth:
            dirs.clear()
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.lower().endswith(".gguf"):
                yield Path(folder) / name


def _first_parts(files) -> list[tuple[Path, list[Path]]]:
    """Group split GGUF sets: (part 1, all parts); single files are their own set."""
    out = []
    files = list(files)
    for f in files:
        part = split_part(f.name)
        if not part:
            out.append((f, [f]))
        elif part.index == 1:
            parts = sorted(g for g in files if g.parent == f.parent and _same_set(split_part(g.name), part))
            out.append((f, parts))
    return out


def _same_set(a: SplitPart | None, b: SplitPart) -> bool:
    return a is not None and a.base == b.base and a.count == b.count


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError:
        return False


def _ollama_models(root: Path) -> list[tuple[str, Path]]:
    """(name:tag, blob) for each Ollama model whose weights blob is GGUF."""
    blobs = root / "blobs"
    if not blobs.is_dir():
        return []
    names: dict[Path, str] = {}
    manifests = root / "manifests"
    for manifest in (manifests.rglob("*") if manifests.is_dir() else ()):
        if not manifest.is_file():
            continue
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            layer = next(x for x in data.get("layers", []) if x.get("mediaType", "").endswith(".model"))
        except (OSError, ValueError, StopIteration, AttributeError):
            continue
        rel = manifest.relative_to(manifests).parts
        label = f"{rel[-2]}:{rel[-1]}" if len(rel) >= 2 else manifest.name
        names[blobs / layer["digest"].replace(":", "-")] = label
    found = []
    for blob in sorted(blobs.iterdir()):
        if blob.is_file() and _is_gguf(blob):
            found.append((names.get(blob, blob.name[:19]), blob))
    return found


def discover(home: Path | None = None) -> list[tuple[str, str, list[Path]]]:
    """(source, name, parts) of GGUF files other apps keep; read-only."""
    if os.environ.get("HEARTH_NO_DISCOVERY") == "1":
        return []
    found = []
    for source, roots in discovery_roots(home).items():
        for root in roots:
            if source == "ollama":
                found += [(source, name, [blob]) for name, blob in _ollama_models(root)]
                continue
            for first, parts in _first_parts(_walk_gguf(root)):
                if source == "huggingface":
                    repo = next((p[len("models--"):].replace("--", "/") for p in first.parts
                                 if p.startswith("models--")), "")
                    name = f"{repo}/{first.name}" if repo else first.name
                else:
                    name = str(first.relative_to(root))
                found.append((source, name, parts))
    return found


# --- listing -------------------------------------------------------------------

def _entry(name: str, parts: list[Path], source: str, owned: bool, cache: dict) -> LibraryEntry:
    meta = _metadata(parts[0], cache)
    size = 0
    for p in parts:
        try:
            size += p.stat().st_size
        except OSError:
            pass
    return LibraryEntry(name=name, path=str(parts[0]), size_bytes=size, source=source, owned=owned,
                        architecture=meta.get("architecture"), parameters=meta.get("parameters"),
                        quantization=meta.get("quantization"), context_length=meta.get("context_length"),
                        parts=len(parts), error=meta.get("error"))


def _display_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root)
    # Downloads live in owner__repo/ folders: show owner/repo/file.
    return str(rel).replace("__", "/", 1) if len(rel.parts) > 1 else rel.name


def list_models(discover_others: bool = True, home: Path | None = None) -> list[LibraryEntry]:
    """Every model Hearth can load: bundled, its own, imported, and (read-only) other apps'."""
    cache = read_json(_cache_file(), {}) or {}
    entries: list[LibraryEntry] = []
    seen: set[str] = set()

    def add(entry: LibraryEntry) -> None:
        key = os.path.realpath(entry.path)
        if key not in seen:
            seen.add(key)
            entries.append(entry)

    try:
        from app.core.bundled import BUNDLED_NAME, bundled_model_path

        bundled = bundled_model_path()
        if bundled.exists():
            add(_entry(BUNDLED_NAME, [bundled], "bundled", False, cache))
    except HearthError:
        pass

    recorded = {e["path"]: e for e in _index()}
    models = paths.models_dir().resolve()
    for first, parts in _first_parts(_walk_gguf(models)):
        rec = recorded.get(str(first.resolve()))
        source = rec["source"] if rec else "hearth"
        add(_entry(_display_name(first, models), parts, source, True, cache))
    for path, rec in recorded.items():
        p = Path(path)
        if p.exists() and not p.is_relative_to(models):
            add(_entry(p.name, _set_of(p), rec.get("source", "imported"), bool(rec.get("owned")), cache))

    if discover_others:
        for source, name, parts in discover(home):
            add(_entry(name, parts, source, False, cache))
    try:
        write_json(_cache_file(), {k: v for k, v in cache.items() if Path(k).exists()})
    except OSError:
        pass  # a read-only cache folder only costs speed
    return entries


def _set_of(path: Path) -> list[Path]:
    """All parts of the split set that `path` starts, or just [path]."""
    return next((parts for first, parts in _first_parts(path.parent.glob("*.gguf")) if first == path), [path])


def resolve(query: str | Path, discover_others: bool = True) -> LibraryEntry:
    """A library entry by path, name, file name or file stem (case-insensitive); 'bundled' is the bundled model."""
    text = str(query).strip()
    if not text:
        raise ModelFileError("Name a model: a path to a GGUF file or a name from `hearth models list`.")
    p = Path(text).expanduser()
    entries = list_models(discover_others)
    if p.exists():
        real = os.path.realpath(p)
        for e in entries:
            if os.path.realpath(e.path) == real:
                return e
        return _entry(p.name, _set_of(p.resolve()), "file", False, {})
    low = text.lower()
    if low == "bundled":
        found = [e for e in entries if e.source == "bundled"]
    else:
        found = [e for e in entries if low in (e.name.lower(), Path(e.path).name.lower(), Path(e.path).stem.lower())
                 or e.name.lower().endswith("/" + low)]
    if not found:
        raise ModelFileError(f"No model named '{text}' in the library; `hearth models list` shows what there is, "
                             "or give a path to a GGUF file.")
    return found[0]


# --- import and remove -----------------------------------------------------------

def import_model(path: str | Path, mode: str = "link") -> LibraryEntry:
    """Add a GGUF file (all parts of a split set) to the library: link (record in place), copy or move."""
    if mode not in IMPORT_MODES:
        raise HearthError(f"Unknown import mode '{mode}'; use {', '.join(IMPORT_MODES)}.")
    src = Path(path).expanduser()
    info = read_gguf_info(src)  # refuses anything that is not a sound GGUF, with its reason
    src = src.resolve()
    parts = _set_of(src)
    if info.split_count > 1 and len(parts) != info.split_count:
        raise ModelFileError(f"{src.name} is part 1 of {info.split_count} files, but only {len(parts)} are "
                             "next to it; import needs all parts in one folder.")
    models = paths.models_dir().resolve()
    if mode == "link" or src.is_relative_to(models):
        register(src, "imported", owned=src.is_relative_to(models))
        return resolve(src, discover_others=False)
    dest_dir = models / "imported"
    dest_dir.mkdir(parents=True, exist_ok=True)
    # Named .gguf whatever the source was called: the file was judged by its content above, and the library
    # lists its own folder by that extension (a copy without it would be invisible and impossible to remove).
    targets = [dest_dir / (p.name if p.name.lower().endswith(".gguf") else p.name + ".gguf") for p in parts]
    clash = next((t for t in targets if t.exists()), None)
    if clash:
        raise HearthError(f"{clash.name} is already in Hearth's models folder; remove it first "
                          "(hearth models rm) or rename the file.")
    needed = sum(p.stat().st_size for p in parts)
    if mode == "copy" and shutil.disk_usage(dest_dir).free < needed:
        raise HearthError(f"Not enough disk space to copy {src.name} ({needed / 2**30:.2f} GB) into {dest_dir}.")
    done: list[Path] = []
    try:
        for p, t in zip(parts, targets):
            if mode == "copy":
                shutil.copy2(p, t)
            else:
                shutil.move(p, t)
            done.append(t)
    except OSError as exc:
        if mode == "copy":
            for t in done:
                t.unlink(missing_ok=True)
        raise HearthError(f"Could not {mode} {src.name} into {dest_dir}: {exc.strerror or exc}.") from None
    register(targets[0], "imported", owned=True)
    return resolve(targets[0], discover_others=False)


@dataclass
class Removal:
    entry: LibraryEntry
    deleted: list[str]  # files deleted from disk
    forgotten: bool  # the entry was only removed from the index (a linked import)


def remove_model(query: str | Path) -> Removal:
    """Delete a model Hearth owns; forget a linked import (its file stays); refuse anything else."""
    entry = resolve(query)
    if entry.source == "bundled":
        raise HearthError("The bundled model is part of Hearth and cannot be removed.")
    if entry.source in DISCOVERED_SOURCES:
        raise HearthError(f"{entry.name} belongs to {APP_NAMES[entry.source]}; Hearth only lists it and never "
                          "deletes other apps' files.")
    real = str(Path(entry.path).resolve())
    if not entry.owned:
        if entry.source == "file" or real not in {e["path"] for e in _index()}:
            raise HearthError(f"{entry.path} is not in Hearth's library, so Hearth will not delete it.")
        _forget(real)
        return Removal(entry, [], True)
    deleted = []
    for part in _set_of(Path(entry.path)):
        try:
            part.unlink()
            deleted.append(str(part))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise HearthError(f"Could not delete {part}: {exc.strerror or exc}.") from None
    _forget(real)
    folder = Path(entry.path).parent
    models = paths.models_dir().resolve()
    if folder.resolve() != models and folder.resolve().is_relative_to(models) and not any(folder.iterdir()):
        folder.rmdir()  # an emptied owner__repo folder
    return Removal(entry, deleted, False)
