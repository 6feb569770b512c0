"""Other apps' models, found read-only: the Hugging Face cache, LM Studio, GPT4All and Ollama, under the user's
home (or HEARTH_DISCOVERY_HOME); every file the scan reads is bounded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from app.core import env
from app.core.store.bounded_read import Budget, TooBig, load_json, read_file
from app.core.errors import ModelFileError
from app.core.gguf.names import SplitPart, split_part
from app.core.gguf.modelfile import is_regular_file, open_model_file
from app.core.library.entry import MAX_DEPTH


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
