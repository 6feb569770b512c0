"""The llama.cpp sources Hearth builds native programs and libraries from: the ones vendored in the pinned
llama-cpp-python sdist.

Building from that very sdist keeps what is built (the llama-server of scripts/build_llama_server.py, the
Vulkan and CUDA engine runtimes of app/core/making/runtime_build.py) on the kernels, the GGUF reader and the C API
of the binding Hearth runs, so a runtime's libraries can be loaded under it (LLAMA_CPP_LIB_PATH).

The sdist is fetched with `pip download --no-binary :all: --no-deps`: pip is the ordinary client of the
package registry, and nothing else is downloaded. An sdist already on disk is used as it is.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
import sys
import tarfile
from pathlib import Path

from app.core.errors import HearthError

# What pyproject.toml pins; used when the binding is not installed (a build script run outside Hearth).
PINNED_VERSION = "0.3.36"
DIST = "llama-cpp-python"

# Folders of vendor/llama.cpp that no build reads: models (vocab test files, ~60 MB), docs, media, benches.
SKIPPED_FOLDERS = ("models/", "docs/", "media/", "benches/", ".git")


class SourcesError(HearthError):
    """The llama.cpp sources could not be fetched or unpacked."""


def binding_version() -> str:
    """The installed llama-cpp-python's version: what a runtime must be built from to load under it."""
    try:
        return importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return PINNED_VERSION


def sdist_name(version: str) -> str:
    return f"llama_cpp_python-{version}.tar.gz"


def find_sdist(folders: list[Path], version: str) -> Path | None:
    """An sdist of this version already in one of these folders, or None."""
    for folder in folders:
        candidate = Path(folder) / sdist_name(version)
        if candidate.is_file() and candidate.stat().st_size > 0:
            return candidate
    return None


def fetch_sdist(folder: Path, version: str, log=None) -> Path:
    """The sdist in folder, downloaded with pip first if it is not there yet."""
    found = find_sdist([folder], version)
    if found is not None:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    print(f"downloading the {DIST} {version} sdist into {folder} ...", file=log or sys.stderr, flush=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                           f"{DIST}=={version}", "-d", str(folder)],
                          stdout=log or subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = find_sdist([folder], version)
    if proc.returncode != 0 or found is None:
        tail = (proc.stdout or "").strip().splitlines()[-1:] if log is None else []
        raise SourcesError(f"pip could not download the {DIST} {version} sdist"
                           f"{' (' + tail[0] + ')' if tail else ''}; download it elsewhere and pass it with --sdist.")
    return found


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def llama_cpp_prefix(version: str) -> str:
    return f"llama_cpp_python-{version}/vendor/llama.cpp/"


def llama_cpp_members(tar: tarfile.TarFile, version: str) -> list[tarfile.TarInfo]:
    """The sdist's vendor/llama.cpp, without the folders no build reads (what is unpacked, and what the GPU check
    carries)."""
    prefix = llama_cpp_prefix(version)
    skipped = tuple(prefix + d for d in SKIPPED_FOLDERS)
    return [m for m in tar.getmembers() if m.name.startswith(prefix) and not m.name.startswith(skipped)]


def unpack_llama_cpp(sdist: Path, into: Path, version: str) -> Path:
    """Unpack only vendor/llama.cpp, without the folders no build reads; returns the llama.cpp source folder."""
    try:
        with tarfile.open(sdist) as tar:
            members = llama_cpp_members(tar, version)
            if not members:
                raise SourcesError(f"{sdist} has no vendor/llama.cpp for {DIST} {version}; "
                                   "pass the sdist of that version.")
            tar.extractall(into, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise SourcesError(f"could not unpack {sdist} ({exc}); delete it so that it is downloaded again.") from exc
    return into / llama_cpp_prefix(version)
