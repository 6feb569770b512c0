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

import hashlib
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.core import env
from app.core import paths
from app.core.store.bounded_read import Budget, TooBig, load_json, read_file
from app.core.errors import HearthError, ModelFileError
from app.core.gguf.info import read_gguf_info
from app.core.gguf.names import SplitPart, split_part
from app.core.store.jsonstore import is_object, read_json, update_json, write_json
from app.core.gguf.modelfile import is_regular_file, open_model_file
from app.core.units import human_size

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
    # Unique in the library, even ignoring case: what the CLI, the API (`model`) and the window name it by.
    # The file's stem, qualified by its source (or a hash of its path) where another entry shares the stem.
    id: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


# --- index of imports ----------------------------------------------------------

def index_file() -> Path:
    return paths.data_dir() / "library.json"


def _index() -> list[dict]:
    data = read_json(index_file(), {}, valid=_index_shape, clean=_sound_entries)
    return list(data.get("models", [])) if isinstance(data, dict) else []


def _update_index(change) -> None:
    """Change the index's entries as one locked step: two processes importing at once both keep theirs."""
    update_json(index_file(), lambda data: {"models": change(list(data.get("models", [])))}, {},
                valid=_index_shape, clean=_sound_entries)


def _index_shape(data) -> bool:
    """What library.json must be: anything else is damage, kept aside and said (app/core/store/jsonstore.py), and the
    next import does not write over it."""
    return isinstance(data, dict) and isinstance(data.get("models", []), list)


# An entry's fields and the types its readers take for granted (a path that is a number, a source that is an
# object, crashed `models list` and `models import`).
_ENTRY_FIELDS = {"path": str, "source": str, "owned": bool, "added": (int, float)}


def _entry_problem(entry) -> str | None:
    """Why one index entry cannot be used, as a phrase; None for a sound one."""
    if not isinstance(entry, dict):
        return f"an entry is {_json_kind(entry)}, not an object"
    for key, kind in _ENTRY_FIELDS.items():
        if key in entry and _wrong_type(entry[key], kind):
            whose = "an entry's" if key == "path" else f"the entry of {str(entry.get('path'))[:80]!r}:"
            return f"{whose} '{key}' is {_json_kind(entry[key])}"
    path = entry.get("path")
    if not path or "\0" in path or not os.path.isabs(path):
        return f"'path' {str(path)[:80]!r} is not a file's full path"
    if entry.get("source", "imported") not in OWNED_SOURCES:
        return f"'source' of {path[:80]!r} is {entry['source'][:40]!r}, not one of {', '.join(OWNED_SOURCES)}"
    return None


def _json_kind(value) -> str:
    """What a JSON value is, in words (a number, an object), for a sentence about an entry."""
    for kind, words in ((bool, "true or false"), (str, "text"), ((int, float), "a number"), (dict, "an object"),
                        (list, "a list")):
        if isinstance(value, kind):
            return words
    return "null"


def _wrong_type(value, kind) -> bool:
    # JSON's true is a Python int too: a count or a time that is true is as wrong as one that is text.
    return not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))


def _sound_entries(data) -> tuple[dict, list[str]]:
    """The index without the entries it cannot use (jsonstore's clean), and a phrase for each one left out."""
    entries = data.get("models", [])
    problems = [_entry_problem(e) for e in entries]
    return ({**data, "models": [e for e, problem in zip(entries, problems) if problem is None]},
            [problem for problem in problems if problem is not None])


def register(path: str | Path, source: str, owned: bool) -> None:
    """Record a file outside the models folder (an import link, a quantized --out file)."""
    p = str(Path(path).resolve())
    _update_index(lambda entries: [e for e in entries if e["path"] != p]
                  + [{"path": p, "source": source, "owned": owned, "added": time.time()}])


def _forget(path: str) -> None:
    _update_index(lambda entries: [e for e in entries if e["path"] != path])


def missing_records() -> list[tuple[str, str]]:
    """(path, source) of each recorded import whose file is gone (moved, deleted, an unmounted disk): the
    library keeps them, marked, until the user locates the file or removes the record (#49.8)."""
    return [(e["path"], e.get("source", "imported")) for e in _index() if not Path(e["path"]).exists()]


def forget_missing(path: str | Path) -> None:
    """Remove a record whose file is gone; a file that is there is never forgotten this way."""
    if Path(path).exists():
        raise HearthError(f"{path} is there; remove it from the library as any other model.")
    _forget(str(path))


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


# --- discovery -----------------------------------------------------------------

def discovery_home() -> Path | None:
    value = env.DISCOVERY_HOME.get()
    return Path(value) if value else None


def discovery_roots(home: Path | None = None) -> dict[str, list[Path]]:
    """Where other apps keep models. With `home` (or HEARTH_DISCOVERY_HOME) everything is looked up below it;
    otherwise the apps' own environment variables (HF_HUB_CACHE, HF_HOME, OLLAMA_MODELS) are honoured too."""
    explicit = home or discovery_home()
    base = explicit or Path.home()
    apps = {} if explicit else os.environ  # the other apps' own variables
    hf = apps.get("HF_HUB_CACHE") or (str(Path(apps["HF_HOME"]) / "hub") if apps.get("HF_HOME") else None)
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
        "ollama": [Path(apps["OLLAMA_MODELS"]) if apps.get("OLLAMA_MODELS") else base / ".ollama" / "models"],
    }


def _walk_gguf(root: Path, max_depth: int = MAX_DEPTH):
    return _walk_files(root, max_depth, lambda name: name.lower().endswith(".gguf"))


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
        with open_model_file(path) as fh:
            return fh.read(4) == b"GGUF"
    except (OSError, ModelFileError):
        return False


# An Ollama manifest is a few hundred bytes of JSON; anything past this is not one, and is not read further.
MAX_MANIFEST_BYTES = 1 << 20


def _ollama_models(root: Path) -> list[tuple[str, Path]]:
    """(name:tag, blob) for each Ollama model whose weights blob is GGUF."""
    blobs = root / "blobs"
    if not blobs.is_dir():
        return []
    names: dict[Path, str] = {}
    manifests = root / "manifests"
    for manifest in _walk_files(manifests):
        digest = _model_digest(manifest)
        if digest is None:
            continue
        rel = manifest.relative_to(manifests).parts
        label = f"{rel[-2]}:{rel[-1]}" if len(rel) >= 2 else manifest.name
        names[blobs / digest.replace(":", "-")] = label
    found = []
    for blob in sorted(blobs.iterdir()):
        if is_regular_file(blob) and _is_gguf(blob):
            found.append((names.get(blob, blob.name[:19]), blob))
    return found


def _walk_files(root: Path, max_depth: int = MAX_DEPTH, wanted=lambda name: True):
    """The regular files below root whose names are wanted, as deep as discovery walks, hidden folders left out.
    Only regular files: a FIFO (or a device) would block whoever opens it."""
    if not root.is_dir():
        return
    root_depth = len(root.parts)
    for folder, dirs, files in os.walk(root, followlinks=False):
        if len(Path(folder).parts) - root_depth >= max_depth:
            dirs.clear()
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if wanted(name) and is_regular_file(Path(folder) / name):
                yield Path(folder) / name


def _model_digest(manifest: Path) -> str | None:
    """The digest of the weights layer an Ollama manifest names; None for a file that is not such a manifest.
    Read within MAX_MANIFEST_BYTES (app/core/store/bounded_read.py): a 3 GB file among the manifests was read whole."""
    try:
        data = load_json(read_file(manifest, Budget(str(manifest), MAX_MANIFEST_BYTES)), str(manifest))
    except (OSError, ValueError, TooBig):  # (UnicodeDecodeError is a ValueError)
        return None
    layers = data.get("layers") if isinstance(data, dict) else None
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and str(layer.get("mediaType", "")).endswith(".model") \
                and isinstance(layer.get("digest"), str) and "/" not in layer["digest"]:
            return layer["digest"]
    return None


def discover(home: Path | None = None) -> list[tuple[str, str, list[Path]]]:
    """(source, name, parts) of GGUF files other apps keep; read-only."""
    if env.NO_DISCOVERY.get():
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
    cache = read_json(_cache_file(), {}, valid=is_object, quiet=True)  # rebuilt by itself: its damage is no news
    entries: list[LibraryEntry] = []
    seen: set[str] = set()

    def add(entry: LibraryEntry) -> None:
        key = os.path.realpath(entry.path)
        if key not in seen:
            seen.add(key)
            entries.append(entry)

    try:
        from app.core.library.bundled import BUNDLED_NAME, bundled_model_path

        bundled = bundled_model_path()
        if bundled.exists():
            add(_entry(BUNDLED_NAME, [bundled], "bundled", False, cache))
    except HearthError:
        pass

    recorded = {e["path"]: e for e in _index()}
    models = paths.models_dir().resolve()
    clean_partial_copies(models / "imported")
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
    assign_ids(entries)
    return entries


def _base_id(entry: LibraryEntry) -> str:
    path = Path(entry.path)
    # An Ollama blob is named by its digest: its name:tag is what the user knows it by.
    return path.stem if path.name.lower().endswith(".gguf") else entry.name


def assign_ids(entries: list[LibraryEntry]) -> None:
    """Give every entry an id no other entry has, even ignoring case (names and stems are not: a linked
    `x-q4_k_m.gguf` and a quantized `x-Q4_K_M.gguf` are two files)."""
    groups: dict[str, list[LibraryEntry]] = {}
    for e in entries:
        groups.setdefault(_base_id(e).casefold(), []).append(e)
    for group in groups.values():
        if len(group) == 1:
            group[0].id = _base_id(group[0])
            continue
        sources = [e.source for e in group]
        for e in group:
            tag = e.source if sources.count(e.source) == 1 else \
                hashlib.sha1(os.path.realpath(e.path).encode()).hexdigest()[:6]
            e.id = f"{_base_id(e)}@{tag}"


def _set_of(path: Path) -> list[Path]:
    """All parts of the split set that `path` starts, or just [path]."""
    return next((parts for first, parts in _first_parts(path.parent.glob("*.gguf")) if first == path), [path])


class AmbiguousModel(ModelFileError):
    """A name that more than one library entry answers to: refused, never guessed."""

    def __init__(self, message: str, candidates: list[LibraryEntry]):
        super().__init__(message)
        self.candidates = candidates


def _levels(query: str):
    """Predicates from the most exact to the loosest: the id, the name, the file name, the file stem; then
    any of those ignoring case, or the end of a name (`repo/file.gguf` of `owner/repo/file.gguf`)."""
    folded = query.casefold()

    def loose(e: LibraryEntry) -> bool:
        path = Path(e.path)
        return folded in (e.id.casefold(), e.name.casefold(), path.name.casefold(), path.stem.casefold()) \
            or e.name.casefold().endswith("/" + folded)

    return (lambda e: e.id == query, lambda e: e.name == query, lambda e: Path(e.path).name == query,
            lambda e: Path(e.path).stem == query, loose)


def find(query: str, entries: list[LibraryEntry]) -> LibraryEntry | None:
    """The entry `query` names: an exact match always wins over a looser one; two matches at the same level
    are refused with the candidates (AmbiguousModel). None when nothing matches."""
    text = query.strip()
    for matches in _levels(text):
        found = [e for e in entries if matches(e)]
        if len(found) == 1:
            return found[0]
        if found:
            listed = "; ".join(f"{e.id} ({e.path})" for e in found)
            raise AmbiguousModel(f"'{text}' names {len(found)} models in the library: {listed}. "
                                 "Use one of these ids (`hearth models list` shows them) or a path.", found)
    return None


def entry_for_path(path: str | Path, entries: list[LibraryEntry] | None = None) -> LibraryEntry | None:
    """The library entry of a file, if the library has one."""
    real = os.path.realpath(path)
    return next((e for e in (entries if entries is not None else list_models())
                 if os.path.realpath(e.path) == real), None)


def resolve(query: str | Path, discover_others: bool = True) -> LibraryEntry:
    """A library entry by path, id, name, file name or file stem (see find; the API matches names only, through
    find); 'bundled' is the bundled model."""
    text = str(query).strip()
    if not text:
        raise ModelFileError("Name a model: a path to a GGUF file or a name from `hearth models list`.")
    entries = list_models(discover_others)
    p = Path(text).expanduser()
    if p.exists():
        found = entry_for_path(p, entries)
        if found is not None:
            return found
        entry = _entry(p.name, _set_of(p.resolve()), "file", False, {})
        entry.id = p.stem
        return entry
    if text.casefold() == "bundled":
        found = next((e for e in entries if e.source == "bundled"), None)
    else:
        found = find(text, entries)
    if found is None:
        raise ModelFileError(f"No model named '{text}' in the library; `hearth models list` shows what there is, "
                             "or give a path to a GGUF file.")
    return found


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
    partials: list[Path] = []
    clean_partial_copies(dest_dir)
    try:
        if mode == "copy":
            # Each part copied under a temporary name first, then renamed: an interrupted copy (a kill, a power
            # cut) is never a file under the final name, listed as a model and refused as a duplicate.
            for p, t in zip(parts, targets):
                partials.append(_copy_partial(p, t))
            for partial, t in zip(partials, targets):
                _rename_new(partial, t)
                done.append(t)
        else:
            for p, t in zip(parts, targets):
                try:
                    os.rename(p, t)  # the same file system: at once, and whole
                except OSError:  # another one: copied as above, then the source removed
                    partial = _copy_partial(p, t)
                    partials.append(partial)
                    _rename_new(partial, t)
                    p.unlink()
                done.append(t)
    except OSError as exc:
        if mode == "copy":
            for t in done + partials:
                t.unlink(missing_ok=True)
        raise HearthError(f"Could not {mode} {src.name} into {dest_dir}: {exc.strerror or exc}.") from None
    register(targets[0], "imported", owned=True)
    return resolve(targets[0], discover_others=False)


PARTIAL = ".partial-"  # in a copy's temporary name: ".<name>.partial-<pid>", never listed (not *.gguf)


def _copy_partial(source: Path, target: Path) -> Path:
    partial = target.with_name(f".{target.name}{PARTIAL}{os.getpid()}")
    with source.open("rb") as src, partial.open("wb") as out:
        shutil.copyfileobj(src, out, 16 * 2**20)
        out.flush()
        os.fsync(out.fileno())  # on disk before it has the final name
    shutil.copystat(source, partial)
    return partial


def _rename_new(partial: Path, target: Path) -> None:
    """partial becomes target, never over a file that came there meanwhile."""
    try:
        os.link(partial, target)  # fails if target exists: no clobbering
    except FileExistsError:
        raise OSError(f"{target.name} appeared in the folder during the copy") from None
    except OSError:  # a file system without hard links
        if target.exists():
            raise OSError(f"{target.name} appeared in the folder during the copy") from None
        os.replace(partial, target)
        return
    partial.unlink()


def clean_partial_copies(folder: Path | None = None) -> list[Path]:
    """Remove what interrupted copies left (their process is gone); the files removed."""
    folder = folder or paths.models_dir() / "imported"
    removed = []
    try:
        leftovers = [f for f in folder.iterdir() if f.name.startswith(".") and PARTIAL in f.name]
    except OSError:
        return removed
    for leftover in leftovers:
        pid = leftover.name.rsplit(PARTIAL, 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue  # a copy under way in another process
        try:
            leftover.unlink()
            removed.append(leftover)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    import psutil

    return psutil.pid_exists(pid)


@dataclass
class Removal:
    """What removing an entry does, said before it is done: delete Hearth's own files, or only forget a linked
    import (its file stays where it is)."""
    entry: LibraryEntry
    files: list[tuple[str, int]]  # (path, bytes) of the files that will be deleted; empty when forgetting
    forgotten: bool  # the entry is only removed from the index (a linked import)
    deleted: list[str] = field(default_factory=list)  # files deleted, once carried out

    def describe(self) -> str:
        if self.forgotten:
            return f"{self.entry.id}: the link to {self.entry.path} is removed from the library; the file stays."
        total = sum(size for _, size in self.files)
        listed = ", ".join(path for path, _ in self.files)
        return f"{self.entry.id}: {listed} ({human_size(total)}) will be deleted from disk."


def plan_removal(query: str | Path) -> Removal:
    """What `remove_model` would do to the entry `query` names; refuses what Hearth may not remove."""
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
        return Removal(entry, [], True)
    files = []
    for part in _set_of(Path(entry.path)):
        try:
            files.append((str(part), part.lstat().st_size))  # a link in the models folder: the link's own size
        except OSError:
            continue
    return Removal(entry, files, False)


def carry_out(removal: Removal) -> Removal:
    """Do what plan_removal said, to exactly the files it named."""
    entry = removal.entry
    real = str(Path(entry.path).resolve())
    for path, _size in removal.files:
        try:
            Path(path).unlink()  # a symbolic link is unlinked, never the file it points to
            removal.deleted.append(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise HearthError(f"Could not delete {path}: {exc.strerror or exc}.") from None
    _forget(real)
    if removal.forgotten:
        return removal
    folder = Path(entry.path).parent
    models = paths.models_dir().resolve()
    if folder.resolve() != models and folder.resolve().is_relative_to(models) and not any(folder.iterdir()):
        folder.rmdir()  # an emptied owner__repo folder
    return removal


def remove_model(query: str | Path) -> Removal:
    """Delete a model Hearth owns; forget a linked import (its file stays); refuse anything else."""
    return carry_out(plan_removal(query))
