"""Turn the PyInstaller bundle (dist/Hearth/) into a Debian package with dpkg-deb.

What the package installs, and why there:

    /opt/hearth/                                    the bundle as built (add-on software goes to /opt, FHS 3.13)
    /usr/bin/hearth -> /opt/hearth/Hearth           the command on PATH (the bundle finds its _internal/
                                                    folder through the resolved link)
    /usr/share/applications/io.hearth.Hearth.desktop
    /usr/share/icons/hicolor/<N>x<N>/apps/io.hearth.Hearth.png, scalable/apps/io.hearth.Hearth.svg
    /usr/share/metainfo/io.hearth.Hearth.metainfo.xml
    /usr/share/doc/hearth/copyright

There are no maintainer scripts. The menu and the icon caches are refreshed by the triggers that
desktop-file-utils and hicolor-icon-theme register on those folders, so a postinst has nothing to do; and
without a postrm, `apt remove hearth` and `apt purge hearth` remove exactly the files above: the user's
models, chats and settings (~/.local/share/Hearth, ~/.config/Hearth, ~/.cache/Hearth) are never touched.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESOURCES = ROOT / "resources"
APP_ID = "io.hearth.Hearth"
PACKAGE = "hearth"
INSTALL_DIR = "opt/hearth"
# The project's own commit identity; a distributor puts theirs here.
MAINTAINER = "Hearth maintainers <maintainers@users.noreply.a-seed-d69ad40c.example>"

# Libraries the bundle links but does not carry, by the Debian package that provides each. PyInstaller
# leaves out glibc, the GL/EGL drivers and Wayland's client libraries on purpose (they must match the
# user's system), and two xcb helpers that Qt's xcb plugin needs were not on the build machine.
SYSTEM_LIBRARIES = {
    "libEGL.so.1": "libegl1",
    "libvulkan.so.1": "libvulkan1",  # the shipped Vulkan engine runtime (GPU drivers bring their own ICD)
    "libGL.so.1": "libgl1",
    "libxcb.so.1": "libxcb1",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    # Qt 6.5+'s xcb plugin links it and Ubuntu's desktop does not install it (#31.9); the bundle usually carries a
    # copy from the build machine, which a build machine without it cannot.
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libwayland-client.so.0": "libwayland-client0",
    "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1",
}
GLIBC_SONAMES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libresolv.so.2",
                 "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libutil.so.1"}

DESCRIPTION = """\
Run large language models on your own computer
 Hearth chats with large language models offline, on your own hardware, with
 llama.cpp. It manages GGUF models (download from Hugging Face, import,
 quantize), serves them over an OpenAI- and Anthropic-compatible API, and
 shows what the hardware does while it generates.
 .
 A small default model (SmolLM2-135M-Instruct) is included, so it works
 without a download."""

COPYRIGHT = """\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: Hearth

Files: *
Copyright: Hearth contributors
License: Apache-2.0

Files: opt/hearth/_internal/models/*
Copyright: Hugging Face (SmolLM2)
License: Apache-2.0

License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 can be
 found in /usr/share/common-licenses/Apache-2.0.
 The bundled libraries (Python, Qt, llama.cpp, numpy and others) keep their own
 licenses; their notices are in /opt/hearth/_internal.
"""


class DebError(Exception):
    """A package cannot be built; the message says why in one sentence."""


def debian_arch() -> str:
    """The Debian name of this machine's architecture (amd64, arm64, ...)."""
    if shutil.which("dpkg"):
        out = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "armhf", "i686": "i386"}.get(machine, machine)


def deb_name(version: str, arch: str | None = None) -> str:
    # Debian's own naming, package_version_arch.deb, which apt and software centres expect.
    return f"{PACKAGE}_{version}_{arch or debian_arch()}.deb"


def needed_system_libraries(bundle: Path) -> set[str]:
    """Sonames the bundle's ELF files need that the bundle does not carry (empty when objdump is missing)."""
    if shutil.which("objdump") is None:
        return set()
    carried = {p.name for p in bundle.rglob("*") if p.is_file()}
    elves = [p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink() and _is_elf(p)]
    needed: set[str] = set()
    for start in range(0, len(elves), 64):
        out = subprocess.run(["objdump", "-p", *map(str, elves[start:start + 64])], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            field = line.split()
            if field[:1] == ["NEEDED"]:
                needed.add(field[1])
            elif field[:1] == ["SONAME"]:  # a file carried under another name answers to its soname once loaded
                carried.add(field[1])      # (libllama.so, opened first, is libmtmd's libllama.so.0)
    return needed - carried


def _is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def depends(bundle: Path) -> str:
    glibc = platform.libc_ver()[1]
    packages = [f"libc6 (>= {glibc})" if glibc else "libc6"]
    missing = needed_system_libraries(bundle) - GLIBC_SONAMES
    unknown = sorted(missing - SYSTEM_LIBRARIES.keys())
    if unknown:
        raise DebError(f"the bundle needs {', '.join(unknown)}, which it does not carry; add the Debian package "
                       "that provides each to SYSTEM_LIBRARIES in packaging/debian_package.py.")
    # Every package of the table, not only those found: objdump may be missing, and Qt's xcb plugin needs
    # the xcb helpers whether or not this build machine had them.
    packages += sorted(set(SYSTEM_LIBRARIES.values()))
    return ", ".join(packages)


def stage(bundle: Path, root: Path, version: str, arch: str) -> None:
    """Lay out the package's files under root (DEBIAN/ included), with the modes dpkg expects."""
    target = root / INSTALL_DIR
    shutil.copytree(bundle, target, symlinks=True)
    bin_dir = root / "usr" / "bin"
    bin_dir.mkdir(parents=True)
    # A link, not a wrapper script: the bundle resolves /proc/self/exe to find _internal/, and `ps` and the
    # desktop's window matching then see Hearth itself.
    (bin_dir / PACKAGE).symlink_to(f"/{INSTALL_DIR}/Hearth")

    share = root / "usr" / "share"
    _install(RESOURCES / "hearth.desktop", share / "applications" / f"{APP_ID}.desktop")
    _install(RESOURCES / f"{APP_ID}.metainfo.xml", share / "metainfo" / f"{APP_ID}.metainfo.xml")
    for png in sorted((RESOURCES / "icons").glob("hearth-*.png")):
        size = png.stem.split("-")[1]
        _install(png, share / "icons" / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png")
    _install(RESOURCES / "icons" / "hearth.svg", share / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg")
    doc = share / "doc" / PACKAGE
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(COPYRIGHT, encoding="utf-8")

    _normalise_modes(root)
    control = root / "DEBIAN"
    control.mkdir(mode=0o755)
    installed_kib = sum(p.lstat().st_size for p in root.rglob("*") if not p.is_dir()) // 1024 + 1
    fields = {
        "Package": PACKAGE,
        "Version": version,
        "Architecture": arch,
        "Maintainer": MAINTAINER,
        "Installed-Size": str(installed_kib),
        "Depends": depends(bundle),
        # Without a Secret Service, API keys of remote servers last one session (app/core/api_keys.py).
        "Suggests": "gnome-keyring | kwalletmanager",
        "Section": "utils",
        "Priority": "optional",
        "Description": DESCRIPTION,
    }
    (control / "control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()), encoding="utf-8")
    # dpkg --verify and debsums check installed files against these.
    sums = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and control not in p.parents):
        digest = hashlib.md5(path.read_bytes()).hexdigest()  # noqa: S324 (the format is md5)
        sums.append(f"{digest}  {path.relative_to(root).as_posix()}\n")
    (control / "md5sums").write_text("".join(sums), encoding="utf-8")
    for path in control.iterdir():
        path.chmod(0o644)


def _install(source: Path, target: Path) -> None:
    if not source.is_file():
        raise DebError(f"{source} is missing from the checkout.")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _normalise_modes(root: Path) -> None:
    """0755 for folders and anything executable, 0644 for the rest: a umask on the build machine must not leak."""
    for dirpath, dirnames, filenames in os.walk(root):
        Path(dirpath).chmod(0o755)
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            executable = path.stat().st_mode & stat.S_IXUSR
            path.chmod(0o755 if executable else 0o644)


def build_deb(bundle: Path, dist: Path, version: str, arch: str | None = None, compression: str = "xz") -> Path:
    """Build dist/hearth_<version>_<arch>.deb from the bundle folder; returns its path."""
    arch = arch or debian_arch()
    target = dist / deb_name(version, arch)
    with tempfile.TemporaryDirectory(prefix="hearth-deb-", dir=dist) as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        stage(bundle, root, version, arch)
        # --root-owner-group: files belong to root whoever builds. xz is what every dpkg reads (zstd needs
        # dpkg 1.21.18); "none" is for tests, which check the layout, not the compression.
        level = ["-z6"] if compression != "none" else []
        command = ["dpkg-deb", "--root-owner-group", f"-Z{compression}", *level, "--build", str(root), str(target)]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise DebError(f"dpkg-deb could not build the package: {detail}")
    return target
