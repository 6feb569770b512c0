"""Build Hearth's one-folder bundle with PyInstaller, and an archive of it.

    pip install -e ".[package]"
    python packaging/build.py        # -> dist/Hearth/ and dist/Hearth-<version>-<os>-<arch>.tar.gz (.zip elsewhere)
    python packaging/build.py --deb  # and dist/hearth_<version>_<arch>.deb (Linux, needs dpkg-deb)

The same command works on Linux, Windows and macOS (see packaging/README.md for what differs). It builds
for the machine it runs on, with whatever llama-cpp-python is installed: install a CUDA build first
(CMAKE_ARGS="-DGGML_CUDA=on") to get a CUDA bundle.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "packaging" / "hearth.spec"


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def archive(bundle: Path, dist: Path, version: str) -> Path:
    system = {"win32": "windows", "darwin": "macos"}.get(sys.platform, "linux")
    stem = dist / f"Hearth-{version}-{system}-{platform.machine().lower()}"
    if system == "linux":
        target = stem.with_name(stem.name + ".tar.gz")
        with tarfile.open(target, "w:gz", compresslevel=6) as tar:
            tar.add(bundle, arcname=bundle.name)
        return target
    # macOS ships the .app (it sits next to the folder); a zip keeps its symlinks and permissions well enough
    # for a download, and Windows users expect a zip.
    app = dist / "Hearth.app"
    source = app if app.is_dir() else bundle
    return Path(shutil.make_archive(str(stem), "zip", root_dir=source.parent, base_dir=source.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the bundle goes (default dist/)")
    parser.add_argument("--work", type=Path, default=ROOT / "build", help="PyInstaller's work folder (default build/)")
    parser.add_argument("--no-archive", action="store_true", help="build the folder only")
    parser.add_argument("--deb", action="store_true", help="also build a Debian package (Linux, needs dpkg-deb)")
    parser.add_argument("--deb-compression", choices=("xz", "gzip", "none"), default="xz",
                        help="the .deb's compression (default xz, what every dpkg reads; none builds fastest)")
    parser.add_argument("--deb-only", action="store_true",
                        help="package an existing --dist DIR/Hearth as a .deb without building it again")
    parser.add_argument("--vulkan", choices=("auto", "build", "none"), default="auto",
                        help="ship the portable Vulkan engine runtime: auto (default) when it is built already, "
                        "build (build it first: about 6 minutes on 2 cores), none")
    parser.add_argument("--embedding", choices=("auto", "none"), default="auto",
                        help="ship the documents' embedding model (all-MiniLM-L6-v2, 44 MiB): auto (default) where "
                        "it is made already or can be made here (the convert extra and its checkpoint), none")
    args = parser.parse_args(argv)
    if (args.deb or args.deb_only) and not sys.platform.startswith("linux"):
        parser.error("--deb builds a Linux package; build it on Linux.")
    if (args.deb or args.deb_only) and shutil.which("dpkg-deb") is None:
        parser.error("--deb needs dpkg-deb (the dpkg package on Debian and Ubuntu; dpkg on Fedora and Arch).")

    sys.path.insert(0, str(ROOT))
    from app import __version__

    if args.deb_only:
        return _deb(args.dist / "Hearth", args.dist, __version__, args.deb_compression)
    started = time.monotonic()
    env = dict(os.environ)
    staged = _stage_vulkan(args.vulkan, args.work / "runtimes")
    if staged is not None:
        env["HEARTH_SHIP_RUNTIMES"] = str(staged)
    embedding = _stage_embedding(args.embedding, args.work / "embedding")
    if embedding is not None:
        env["HEARTH_SHIP_EMBEDDING"] = str(embedding)
    command = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
               "--distpath", str(args.dist), "--workpath", str(args.work), str(SPEC)]
    print("+", " ".join(command), flush=True)
    if subprocess.call(command, cwd=ROOT, env=env) != 0:
        print("build.py: PyInstaller failed", file=sys.stderr)
        return 1
    bundle = args.dist / "Hearth"
    print(f"bundle: {bundle} ({folder_size(bundle) / 1e6:.0f} MB) built in {time.monotonic() - started:.0f} s",
          flush=True)
    if not args.no_archive:
        target = archive(bundle, args.dist, __version__)
        print(f"archive: {target} ({target.stat().st_size / 1e6:.0f} MB)", flush=True)
    if args.deb:
        return _deb(bundle, args.dist, __version__, args.deb_compression)
    return 0


def _stage_embedding(mode: str, into: Path) -> Path | None:
    """The documents' embedding GGUF for the spec to ship (frozen Hearth finds it under embedding/), or None,
    said in one line. It is made here because this is where torch is: the .deb and the bundle have no convert
    extra, so without it their documents search would be BM25 alone (app/docs/embed_model.py)."""
    if mode == "none":
        return None
    from app.docs import embed_model

    made = embed_model.find()
    if made is None:
        reason = embed_model.why_not_makeable()
        if reason:
            print(f"build.py: the embedding model is not shipped ({reason}), so this bundle's documents search is "
                  "BM25 alone", flush=True)
            return None
        print("+ making all-MiniLM-L6-v2 (app.docs.embed_model.make)", flush=True)
        made = embed_model.make(into / embed_model.FILE_NAME)
    print(f"embedding model: {made.name} ({made.stat().st_size / 2**20:.0f} MiB) ships", flush=True)
    return made


def _stage_vulkan(mode: str, into: Path) -> Path | None:
    """The portable Vulkan runtime's files, staged under the names the loader opens, for the spec to ship;
    None when it is not shipped (said in one line)."""
    from app.core.making import runtime_build
    from app.core.making.runtimes import files_to_ship

    if mode == "none":
        return None
    spec = runtime_build.BuildSpec(name="vulkan", portable=True)
    runtime = runtime_build.cached(spec)
    if runtime is None and mode == "build":
        print("+ python -m app.core.making.runtime_build vulkan --portable", flush=True)
        if subprocess.call([sys.executable, "-m", "app.core.making.runtime_build", "vulkan", "--portable"], cwd=ROOT) != 0:
            print("build.py: the Vulkan runtime did not build (the reason is above)", file=sys.stderr)
            raise SystemExit(1)
        runtime = runtime_build.cached(spec)
    if runtime is None:
        print("build.py: no portable Vulkan runtime is built, so this bundle offloads to no GPU "
              "(--vulkan build builds it)", flush=True)
        return None
    shutil.rmtree(into, ignore_errors=True)
    target = into / runtime.key
    target.mkdir(parents=True)
    for source, name in files_to_ship(runtime):
        shutil.copy2(source, target / name)
    print(f"vulkan runtime: {runtime.key} ({sum(p.stat().st_size for p in target.iterdir()) / 1e6:.0f} MB) "
          "ships in the bundle", flush=True)
    return into


def _deb(bundle: Path, dist: Path, version: str, compression: str) -> int:
    from debian_package import DebError, build_deb

    if not (bundle / "Hearth").is_file():
        print(f"build.py: {bundle} holds no Hearth bundle; build it first (without --deb-only).", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        target = build_deb(bundle, dist, version, compression=compression)
    except DebError as exc:
        print(f"build.py: {exc}", file=sys.stderr)
        return 1
    print(f"deb: {target} ({target.stat().st_size / 1e6:.0f} MB) built in {time.monotonic() - started:.0f} s",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
