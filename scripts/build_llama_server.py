#!/usr/bin/env python3
"""Build llama.cpp's `llama-server` and its RPC worker `ggml-rpc-server`, and cache the binaries.

Hearth drives these as a remote backend (README: "When one machine is not enough"); it does not
ship them. They are built from the very llama.cpp sources that llama-cpp-python 0.3.36 vendors,
so the server and Hearth's own engine run the same kernels and read the same GGUF files.

    python scripts/build_llama_server.py            # build once (~10-15 min on 2 cores), print paths
    python scripts/build_llama_server.py --print    # print the cached paths, build nothing (rc 1 if absent)
    python scripts/build_llama_server.py --sdist llama_cpp_python-0.3.36.tar.gz   # skip the download

Where things go: $HEARTH_LLAMA_SERVER_DIR, or ~/.cache/hearth-llama-server/. The finished
binaries land in <dir>/<version>/bin/; a second run finds them and returns at once. The sdist is
fetched with `pip download --no-binary :all: --no-deps` into <dir>/sdist/ (pip is the ordinary
client of the package registry; nothing else is downloaded).

Build flags, and why:
  -DGGML_RPC=ON              the RPC backend: `llama-server --rpc host:port` and the worker binary
  -DLLAMA_BUILD_SERVER=ON    this llama.cpp only adds tools/server when asked (it is off when
                             llama.cpp is not the top-level project, and on otherwise: say it)
  -DLLAMA_USE_PREBUILT_UI=OFF the server's web UI would otherwise be fetched from Hugging Face at
                             build time; Hearth is the UI, and builds here have no network
  -DLLAMA_OPENSSL=OFF        loopback and trusted networks only; no HTTPS client needed
  -DLLAMA_CURL=OFF           no model downloads from the server (deprecated flag, kept harmless)
  -DBUILD_SHARED_LIBS=OFF    self-contained binaries that can be copied out of the build folder
  -DLLAMA_BUILD_TESTS/EXAMPLES=OFF  nothing that the two targets do not need
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a file (python scripts/...), this folder is on sys.path, not the repository: make `app` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.making.llama_sources import PINNED_VERSION, fetch_sdist, unpack_llama_cpp  # noqa: E402

# The pinned binding's version (pyproject.toml), not the installed one: the server is Hearth's remote
# backend and needs no binding at all.
VERSION = PINNED_VERSION
TARGETS = ("llama-server", "ggml-rpc-server")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_RPC=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)


def cache_root() -> Path:
    configured = os.environ.get("HEARTH_LLAMA_SERVER_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "hearth-llama-server"


def binary_paths(root: Path | None = None) -> dict[str, Path]:
    """Where the cached binaries are (or will be), by target name."""
    bin_dir = (root or cache_root()) / VERSION / "bin"
    return {name: bin_dir / name for name in TARGETS}


def cached_binaries(root: Path | None = None) -> dict[str, Path] | None:
    """The binaries if a finished build is cached, else None (tests use this to decide whether to run)."""
    paths = binary_paths(root)
    return paths if all(os.access(p, os.X_OK) for p in paths.values()) else None


def _sdist(root: Path, given: Path | None) -> Path:
    return given if given is not None else fetch_sdist(root / "sdist", VERSION)


def build(root: Path, sdist: Path | None, jobs: int, keep_build: bool) -> dict[str, Path]:
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="llama-server-build-", dir=root))
    try:
        source = unpack_llama_cpp(_sdist(root, sdist), work / "src", VERSION)
        build_dir = work / "build"
        subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_FLAGS], check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--config", "Release", "-j", str(jobs),
                        "--target", *TARGETS], check=True)
        paths = binary_paths(root)
        next(iter(paths.values())).parent.mkdir(parents=True, exist_ok=True)
        for name, dest in paths.items():
            # Copy to a temporary name first: a half-copied binary must never look like a finished build.
            partial = dest.with_suffix(".partial")
            shutil.copy2(build_dir / "bin" / name, partial)
            partial.replace(dest)
    finally:
        if not keep_build:
            shutil.rmtree(work, ignore_errors=True)
    print(f"built in {time.monotonic() - started:.0f} s", flush=True)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print cached paths only; rc 1 if not built")
    parser.add_argument("--sdist", type=Path, help="a llama-cpp-python sdist already on disk")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--rebuild", action="store_true", help="build even if cached binaries exist")
    parser.add_argument("--keep-build", action="store_true", help="keep the cmake build folder")
    args = parser.parse_args(argv)

    root = cache_root()
    paths = None if args.rebuild else cached_binaries(root)
    if paths is None and args.print:
        print(f"not built; run: python {Path(__file__).name}", file=sys.stderr)
        return 1
    if paths is None:
        root.mkdir(parents=True, exist_ok=True)
        paths = build(root, args.sdist, args.jobs, args.keep_build)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
