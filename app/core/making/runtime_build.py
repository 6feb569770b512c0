"""Build the Vulkan and CUDA engine runtimes from the pinned sdist's vendored llama.cpp, and cache them.

    python -m app.core.making.runtime_build vulkan                 # build once (~20 min on 2 cores), print the folder
    python -m app.core.making.runtime_build vulkan --print         # the cached folder, or rc 1 (builds nothing)
    python -m app.core.making.runtime_build cuda --arch 86,90      # CUDA for the named architectures
    python -m app.core.making.runtime_build vulkan --portable --tools   # and llama.cpp's llama-perplexity beside it
    (`hearth runtimes build vulkan|cuda` is the same build.)

Over 600 lines because one build is one sequence (the tools found or fetched, the sources unpacked and trimmed,
cmake, the layout the binding loads, the cache and its lock) that reads best in one place; app/core/making/runtimes.py
lists and chooses what it made.

A build is cached by the binding's version and its flags: the runtime's folder is named
<name>-<version>-<hash of the flags>, and a second build with the same flags returns it at once. It is built in
a temporary folder and renamed into place when complete, so a half build never looks finished; two builds of
the same runtime at once take turns (a lock file), and the second finds the first's result.

Flags, and why:
  -DBUILD_SHARED_LIBS=ON        libllama + libggml* as llama-cpp-python loads them (LLAMA_CPP_LIB_PATH)
  -DGGML_VULKAN=ON / -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=<list>   the backend
  -DGGML_NATIVE=ON              as pip's own build of the binding on this machine (its CMakeCache has
                                GGML_NATIVE=ON, GGML_OPENMP=ON, GGML_CPU_REPACK=ON, GGML_LLAMAFILE=ON,
                                GGML_BACKEND_DL=OFF): layers left on the CPU run the same kernels as the cpu
                                runtime. A runtime built here is for this CPU (its manifest says which, and
                                another CPU does not take it for its own).
  --portable                    for shipping (bundle, .deb): GGML_NATIVE=OFF with x86-64-v3 (AVX2, FMA,
                                F16C, BMI2: every x86 CPU since 2013-2015) instead of -march=native. The
                                binding never calls ggml_backend_load_all, so GGML_BACKEND_DL (ggml's
                                per-CPU variant libraries) cannot be used under it.
  -DLLAMA_BUILD_{TESTS,EXAMPLES,SERVER}=OFF, -DLLAMA_CURL=OFF, -DLLAMA_OPENSSL=OFF, and COMMON and TOOLS on
                                so that libmtmd's target exists (llama.cpp adds tools/ only with both); only the
                                libraries are built (targets llama, ggml, ggml-base, ggml-cpu, ggml-<backend>,
                                mtmd: a model's projector, images and sounds, on this runtime too)
  --tools                       the targets llama-perplexity (bench quality's reference, #33) and llama-mtmd-cli
                                (bench media's, #53) too, into <runtime>/tools/; the libraries and the key are
                                the same
  RPATH $ORIGIN                 the libraries find each other in their folder after the move

Vulkan on Debian 12 needs the packages glslc, spirv-headers and libvulkan-dev, and Vulkan headers newer than
Debian 12's 1.3.239 (ggml-vulkan uses VK_EXT_layer_settings): where the system's are older, Debian 13's
libvulkan-dev headers are fetched with apt-get download through a private apt state folder (no system
sources entry, no root, nothing installed) and unpacked with dpkg -x into <runtimes dir>/vulkan-headers.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, IO, Iterator

from app.core import env
from app.core import machine, paths
from app.core.errors import HearthError
from app.core.making.llama_sources import SourcesError, binding_version, fetch_sdist, find_sdist, sha256, unpack_llama_cpp
from app.core.making.runtimes import (BACKENDS, MANIFEST, Runtime, cpu_key, runtime_from_folder, runtimes_dir,
                               write_manifest)

BUILDABLE = ("vulkan", "cuda")
# mtmd (libmtmd) is what llama_cpp.mtmd_cpp loads from the same folder: without it a runtime's engine reads text only.
COMMON_TARGETS = ("llama", "ggml", "ggml-base", "ggml-cpu", "mtmd")
BACKEND_TARGET = {"vulkan": "ggml-vulkan", "cuda": "ggml-cuda"}
COMMON_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    # On for the configure step only (llama.cpp adds tools/, and so libmtmd's target, with both); the targets
    # named decide what is compiled, and libmtmd needs neither the common library nor a tool.
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_COMMON=ON",
    # libmtmd's video input runs ffmpeg in a subprocess; the binding's own libmtmd is built without it.
    "-DMTMD_VIDEO=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    # What pip's build of the binding used (its CMakeCache.txt), said out loud so a changed default upstream
    # cannot make the runtime's CPU side differ from the cpu runtime's.
    "-DGGML_OPENMP=ON",
    "-DGGML_CPU_REPACK=ON",
    "-DGGML_LLAMAFILE=ON",
    "-DGGML_BACKEND_DL=OFF",
)
NATIVE_FLAGS = ("-DGGML_NATIVE=ON",)
X86_64_V3_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
                   "-DGGML_BMI2=ON")
# Layout, not behaviour: not part of the cache key.
LAYOUT_FLAGS = ("-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN",
                "-DCMAKE_SKIP_INSTALL_RPATH=OFF")
# llama.cpp's own tools, built in the same tree on request (--tools): llama-perplexity is the reference that
# `hearth bench quality` is checked against (#33). They need llama.cpp's common library (some fifty files with its
# chat parsers and templates), which added 358 s to a build on 2 cores under load 2-4 (the libraries alone: 433 s
# there), so they are opt-in (targets only: the configure flags are the same). Not part of the cache key (the libraries are the same with or without them): a
# runtime asked for with its tools and found without them is built again under the same key. They live in
# <runtime>/tools/ with their own libraries, apart from what a bundle ships (runtimes.files_to_ship).
# llama-mtmd-cli: the reference `hearth bench media` is timed against (#53), on the same image and model.
TOOLS = ("llama-perplexity", "llama-mtmd-cli")
TOOLS_DIR = "tools"
VULKAN_HEADERS_ENV = env.VULKAN_INCLUDE.name
SDIST_ENV = env.LLAMA_SDIST.name
TRIXIE_KEYRING = Path("/usr/share/keyrings/debian-archive-trixie-stable.gpg")
# The CUDA architectures to suggest when none is named and no GPU is visible to ask.
CUDA_ARCH_HINT = "75 (RTX 20xx, T4), 80 (A100), 86 (RTX 30xx), 89 (RTX 40xx, L4), 90 (H100, H200), 120 (RTX 50xx)"


class RuntimeBuildError(HearthError):
    """A runtime could not be built; the message says what is missing or which step failed."""


class BuildCancelled(RuntimeBuildError):
    """The build was cancelled; nothing was left behind."""


# --- what is built ---------------------------------------------------------------------------------------------

def portable_cpu_flags() -> tuple[str, ...]:
    if platform.machine().lower() in ("x86_64", "amd64"):
        return X86_64_V3_FLAGS
    return ("-DGGML_NATIVE=OFF",)


@dataclass(frozen=True)
class BuildSpec:
    name: str                                   # vulkan | cuda
    version: str = field(default_factory=binding_version)
    cuda_archs: tuple[str, ...] = ()            # "90", "86", "120a", ... (cuda only)
    portable: bool = False                      # for shipping: no -march=native
    tools: tuple[str, ...] = ()                 # llama.cpp tools built beside the libraries (TOOLS)

    def __post_init__(self):
        unknown = [t for t in self.tools if t not in TOOLS]
        if unknown:
            raise RuntimeBuildError(f"the runtime build makes the tools {', '.join(TOOLS)}, not {', '.join(unknown)}.")
        if self.name not in BUILDABLE:
            raise RuntimeBuildError(f"Hearth builds the {' and '.join(BUILDABLE)} runtimes, not {self.name!r}.")
        if self.name == "cuda" and not self.cuda_archs:
            raise RuntimeBuildError("a CUDA build needs its GPU architectures; name them with --arch "
                                    f"(e.g. {CUDA_ARCH_HINT}).")
        if self.name != "cuda" and self.cuda_archs:
            raise RuntimeBuildError("--arch names CUDA architectures; it applies to `build cuda` only.")

    @property
    def cpu_target(self) -> str:
        return "portable" if self.portable else "native"

    def flags(self) -> tuple[str, ...]:
        """The cmake flags that decide what is built (and so the cache key)."""
        flags = [*COMMON_FLAGS, *(portable_cpu_flags() if self.portable else NATIVE_FLAGS)]
        if self.name == "vulkan":
            flags.append("-DGGML_VULKAN=ON")
        else:
            flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(self.cuda_archs)}"]
        return tuple(flags)

    def flags_hash(self) -> str:
        # A native build's flags mean "this CPU": its key includes the CPU, so a runtimes folder shared
        # between machines (an NFS home, a CI cache) keeps one build per CPU.
        raw = json.dumps([self.name, self.version, sorted(self.flags()),
                          cpu_key() if not self.portable else "portable"])
        return hashlib.sha256(raw.encode()).hexdigest()[:10]

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}-{self.flags_hash()}"

    @property
    def library_targets(self) -> tuple[str, ...]:
        return (*COMMON_TARGETS, BACKEND_TARGET[self.name])

    @property
    def targets(self) -> tuple[str, ...]:
        return (*self.library_targets, *self.tools)


def parse_archs(text: str | None) -> tuple[str, ...]:
    """'86,90' / '86;90' / 'sm_90' / '90a' -> ('86', '90'); a one-sentence error for anything else."""
    if not text:
        return ()
    archs = []
    for part in re.split(r"[,;\s]+", text.strip()):
        if not part:
            continue
        value = part.lower().removeprefix("sm_").removeprefix("compute_")
        if value in ("native", "all", "all-major"):
            archs.append(value)
            continue
        if not re.fullmatch(r"\d{2,3}[af]?", value):
            raise RuntimeBuildError(f"{part!r} is not a CUDA architecture; name them as numbers like 86 or 90 "
                                    f"(e.g. {CUDA_ARCH_HINT}).")
        archs.append(value)
    if not archs:
        raise RuntimeBuildError(f"--arch names no architecture; e.g. --arch 90 ({CUDA_ARCH_HINT}).")
    return tuple(dict.fromkeys(archs))


def visible_cuda_archs() -> tuple[str, ...]:
    """The compute capabilities of the NVIDIA GPUs nvidia-smi sees ('90' for an H200), or ()."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    caps = [line.strip().replace(".", "") for line in out.stdout.splitlines() if re.fullmatch(r"\d+\.\d+", line.strip())]
    return tuple(dict.fromkeys(caps))


# --- what a build needs ------------------------------------------------------------------------------------------

def _first_line(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return lines[0] if lines else None


def find_nvcc() -> str | None:
    """nvcc: $CUDACXX when set (as cmake takes it, and then only that), else on PATH or in the toolkit's
    usual folders."""
    configured = os.environ.get("CUDACXX")
    if configured:
        return configured if os.path.isfile(configured) and os.access(configured, os.X_OK) else None
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        candidate = os.path.join(home, "bin", "nvcc") if home else None
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def nvcc_archs(nvcc: str) -> tuple[str, ...]:
    """The real architectures this nvcc compiles for ('75', '80', ..., '120'), or () where it cannot say."""
    try:
        out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(dict.fromkeys(m for m in re.findall(r"sm_(\d+)", out.stdout)))


def _nvcc_release(nvcc: str) -> str | None:
    line = None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30, check=False)
        found = re.search(r"release ([\d.]+)", out.stdout)
        line = found.group(1) if found else None
    except (OSError, subprocess.SubprocessError):
        pass
    return line


def vulkan_header_version(include: Path) -> str | None:
    """'1.3.239' for the Vulkan headers in include (a folder holding vulkan/vulkan_core.h), or None."""
    try:
        text = (include / "vulkan" / "vulkan_core.h").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    patch = re.search(r"#define VK_HEADER_VERSION (\d+)", text)
    complete = re.search(r"VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(\d+, (\d+), (\d+), VK_HEADER_VERSION\)", text)
    if not patch:
        return None
    major, minor = complete.groups() if complete else ("1", "?")
    return f"{major}.{minor}.{patch.group(1)}"


def vulkan_headers_usable(include: Path) -> bool:
    """New enough for this llama.cpp: ggml-vulkan.cpp uses vk::LayerSettingEXT (VK_EXT_layer_settings)."""
    try:
        core = (include / "vulkan" / "vulkan_core.h").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "VK_EXT_layer_settings" in core and (include / "vulkan" / "vulkan.hpp").is_file()


def fetched_headers_dir(root: Path) -> Path:
    return root / "vulkan-headers"


def fetch_vulkan_headers(dest: Path, log: IO[str] | None = None) -> Path:
    """Debian 13's libvulkan-dev headers, unpacked into dest; returns the include folder.

    apt-get works in a private state folder here (its own sources list, package lists and cache), so nothing
    of the system's apt setup changes and no root is needed; only the one package file is downloaded, and
    dpkg -x unpacks it without installing it."""
    include = dest / "usr" / "include"
    if vulkan_headers_usable(include):
        return include
    if not (shutil.which("apt-get") and shutil.which("dpkg")) or not TRIXIE_KEYRING.is_file():
        raise RuntimeBuildError(
            "the Vulkan headers here are too old for this llama.cpp (it needs VK_EXT_layer_settings, which "
            "Debian 12's 1.3.239 lacks) and Debian 13's cannot be fetched on this system; install newer Vulkan "
            f"headers (e.g. the Vulkan SDK) and pass their include folder with --vulkan-include or {VULKAN_HEADERS_ENV}.")
    with tempfile.TemporaryDirectory(prefix="hearth-apt-") as tmp:
        state = Path(tmp)
        (state / "lists" / "partial").mkdir(parents=True)
        (state / "cache" / "archives" / "partial").mkdir(parents=True)
        sources = state / "trixie.sources"
        sources.write_text("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\n"
                           f"Signed-By: {TRIXIE_KEYRING}\n", encoding="utf-8")
        options = [f"-oDir::Etc::SourceList={sources}", "-oDir::Etc::SourceParts=-",
                   f"-oDir::State::Lists={state / 'lists'}", f"-oDir::Cache={state / 'cache'}",
                   "-oDebug::NoLocking=1"]
        if os.geteuid() == 0:
            options.append("-oAPT::Sandbox::User=root")  # _apt cannot write into a root-owned temporary folder
        for cmd in (["apt-get", *options, "update"], ["apt-get", *options, "download", "libvulkan-dev"]):
            proc = subprocess.run(cmd, cwd=state, capture_output=True, text=True, timeout=600, check=False)
            if log is not None:
                log.write(proc.stdout + proc.stderr)
            if proc.returncode != 0:
                last = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()][-1:]
                raise RuntimeBuildError(
                    "could not fetch Debian 13's libvulkan-dev for newer Vulkan headers "
                    f"({last[0] if last else 'apt-get failed'}); install newer Vulkan headers (Debian 13's "
                    "libvulkan-dev, or the Vulkan SDK) and pass them with --vulkan-include.")
        debs = sorted(state.glob("libvulkan-dev_*.deb"))
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(["dpkg", "-x", str(debs[-1]), str(partial)], check=True, capture_output=True, timeout=120)
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
    if not vulkan_headers_usable(include):
        raise RuntimeBuildError(f"the headers unpacked into {dest} are not usable Vulkan headers.")
    return include


def vulkan_include_dir(root: Path, given: Path | None, fetch: bool, log: IO[str] | None = None) -> Path:
    """The Vulkan headers to build with: given, $HEARTH_VULKAN_INCLUDE, the fetched Debian 13 ones, the
    system's; fetched first when none of those is new enough and fetch is on."""
    configured = env.VULKAN_INCLUDE.get()
    for candidate in (given, Path(configured) if configured else None):
        if candidate is None:
            continue
        if vulkan_headers_usable(Path(candidate)):
            return Path(candidate)
        raise RuntimeBuildError(f"{candidate} holds no usable Vulkan headers (vulkan/vulkan_core.h with "
                                    "VK_EXT_layer_settings and vulkan/vulkan.hpp).")
    fetched = fetched_headers_dir(root) / "usr" / "include"
    if vulkan_headers_usable(fetched):
        return fetched
    system = Path("/usr/include")
    if vulkan_headers_usable(system):
        return system
    version = vulkan_header_version(system)
    if not fetch:
        raise RuntimeBuildError(
            f"the Vulkan headers in {system} ({version or 'none'}) are too old for this llama.cpp (it needs "
            "VK_EXT_layer_settings; Debian 13's 1.4.309 has it); let Hearth fetch Debian 13's (drop "
            "--no-fetch-headers) or pass newer ones with --vulkan-include.")
    return fetch_vulkan_headers(fetched_headers_dir(root), log)


def check_toolchain(spec: BuildSpec, root: Path, vulkan_include: Path | None = None, fetch_headers: bool = True,
                    log: IO[str] | None = None) -> dict:
    """What the build will use, or a one-sentence error naming what is missing and the package that has it."""
    tools: dict = {}
    cmake = shutil.which("cmake")
    if not cmake:
        raise RuntimeBuildError("cmake is not installed; install it (Debian: apt install cmake).")
    tools["cmake"] = _first_line([cmake, "--version"])
    cxx = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    cc = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if not cxx or not cc or not shutil.which(cxx) or not shutil.which(cc):
        raise RuntimeBuildError("no C/C++ compiler is installed; install one (Debian: apt install build-essential).")
    tools["compiler"] = _first_line([cxx, "--version"])
    tools["generator"] = "Ninja" if shutil.which("ninja") else None
    if spec.name == "vulkan":
        glslc = shutil.which("glslc")
        if not glslc:
            raise RuntimeBuildError("glslc, the shader compiler the Vulkan build needs, is not installed "
                                    "(Debian: apt install glslc spirv-headers libvulkan-dev).")
        tools["glslc"] = _first_line([glslc, "--version"])
        include = vulkan_include_dir(root, vulkan_include, fetch_headers, log)
        tools["vulkan_include"] = str(include)
        tools["vulkan_headers"] = vulkan_header_version(include)
    else:
        nvcc = find_nvcc()
        if not nvcc:
            named = f" (CUDACXX names {os.environ['CUDACXX']}, which is not there)" if os.environ.get("CUDACXX") else ""
            raise RuntimeBuildError(f"nvcc (the CUDA toolkit) is not installed{named}; install it (Debian: apt "
                                    "install nvidia-cuda-toolkit from non-free, or NVIDIA's cuda-toolkit package).")
        tools["nvcc"] = nvcc
        tools["cuda"] = _nvcc_release(nvcc)
        known = nvcc_archs(nvcc)
        unknown = [a for a in spec.cuda_archs if a not in ("native", "all", "all-major")
                   and known and a.rstrip("af") not in known]
        if unknown:
            raise RuntimeBuildError(f"nvcc {tools['cuda'] or ''} cannot build for {', '.join('sm_' + a for a in unknown)}; "
                                    f"it builds for {', '.join(known)}.".replace("nvcc  ", "nvcc "))
        if "native" in spec.cuda_archs and not visible_cuda_archs():
            raise RuntimeBuildError("--arch native needs an NVIDIA GPU visible to nvidia-smi, and there is none; "
                                    f"name the architectures instead (e.g. {CUDA_ARCH_HINT}).")
    return tools


# --- the build -------------------------------------------------------------------------------------------------

# cmake's configure messages for what is missing, and the sentence (with packages) for each.
CONFIGURE_HINTS = (
    (re.compile(r"Could NOT find Vulkan.*missing: glslc", re.S), "glslc is missing (Debian: apt install glslc)"),
    (re.compile(r"Could NOT find Vulkan", re.S),
     "the Vulkan loader's development files are missing (Debian: apt install libvulkan-dev)"),
    (re.compile(r"SPIRV-Headers"), "the SPIR-V headers are missing (Debian: apt install spirv-headers)"),
    (re.compile(r"No CMAKE_CUDA_COMPILER could be found|Failed to find nvcc|CUDA Toolkit not found", re.S),
     "cmake cannot find the CUDA toolkit (Debian: apt install nvidia-cuda-toolkit, or NVIDIA's cuda-toolkit)"),
    (re.compile(r"No CMAKE_CXX_COMPILER could be found|No CMAKE_C_COMPILER could be found"),
     "no C/C++ compiler was found (Debian: apt install build-essential)"),
    (re.compile(r"LayerSettingEXT"), "the Vulkan headers are too old (they need VK_EXT_layer_settings; pass "
     "newer ones with --vulkan-include)"),
)
PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]|^\[\s*(\d+)%\]")


def _lines(cmd: list[str], log: IO[str], cancelled: Callable[[], bool] | None, cwd: Path | None = None,
           env: dict | None = None) -> Iterator[str]:
    """Run cmd, write its output to log, yield each line; kill its whole process group when cancelled()."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", cwd=cwd, env=env, start_new_session=True)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, name="runtime-build-reader", daemon=True)
    reader.start()
    try:
        while True:
            if cancelled is not None and cancelled():
                raise BuildCancelled("the runtime build was cancelled.")
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            log.write(line)
            yield line.rstrip("\n")
        proc.wait()
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, cmd)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=5)
        proc.stdout.close()
        log.flush()


def _failure(step: str, spec: BuildSpec, output: list[str], log_path: Path) -> RuntimeBuildError:
    text = "\n".join(output)
    for pattern, sentence in CONFIGURE_HINTS:
        if pattern.search(text):
            return RuntimeBuildError(f"the {spec.name} runtime cannot be built: {sentence}; the log is {log_path}.")
    errors = [line.strip() for line in output if re.search(r"\berror\b|CMake Error", line, re.I)]
    detail = f" ({errors[0][:300]})" if errors else ""
    return RuntimeBuildError(f"the {spec.name} runtime's {step} failed{detail}; the whole log is {log_path}.")


@contextlib.contextmanager
def _locked(path: Path):
    try:
        import fcntl
    except ImportError:  # Windows: builds there are not supported by this module's commands yet
        yield
        return
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ggml_version(source: Path) -> str | None:
    """The ggml version the sources declare (what their libggml's ggml_version() returns)."""
    try:
        text = (source / "ggml" / "CMakeLists.txt").read_text(encoding="utf-8")
    except OSError:
        return None
    parts = [re.search(rf"set\(GGML_VERSION_{p} (\d+)\)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def _library_target(name: str) -> str:
    """'libggml-cpu.so.0.25.3' -> 'ggml-cpu'."""
    return re.sub(r"^lib|(\.so.*|\.dylib|\.dll)$", "", name)


def _stage_libraries(build_dir: Path, stage: Path, spec: BuildSpec) -> list[dict]:
    """Copy the built shared libraries (and their soname links) into stage, and the tools with the libraries only
    they use into stage/tools; the names and sizes of the files copied."""
    bin_dir = build_dir / "bin"
    stage.mkdir(parents=True)
    tools = stage / TOOLS_DIR
    copied = []
    for entry in sorted(bin_dir.glob("lib*.so*")) + sorted(bin_dir.glob("*.dll")) + sorted(bin_dir.glob("lib*.dylib")):
        own = _library_target(entry.name) in spec.library_targets
        if not own and not spec.tools:
            continue
        folder = stage if own else tools
        folder.mkdir(exist_ok=True)
        dest = folder / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry), dest)
        else:
            shutil.copy2(entry, dest)
            copied.append({"file": str(dest.relative_to(stage)), "bytes": entry.stat().st_size})
    for tool in spec.tools:
        tools.mkdir(exist_ok=True)
        shutil.copy2(bin_dir / tool, tools / tool)
        copied.append({"file": f"{TOOLS_DIR}/{tool}", "bytes": (tools / tool).stat().st_size})
    if spec.tools:
        # The tools' RPATH is $ORIGIN: links to the runtime's libraries let them find those beside them.
        for entry in stage.iterdir():
            if entry.name != TOOLS_DIR and not (tools / entry.name).exists():
                os.symlink(f"../{entry.name}", tools / entry.name)
    wanted = [f"lib{t}.so" for t in spec.library_targets] if sys.platform.startswith("linux") else []
    missing = [name for name in wanted if not (stage / name).exists()]
    if missing:
        raise RuntimeBuildError(f"the {spec.name} build finished without {', '.join(missing)}; "
                                "this llama.cpp may name its libraries differently.")
    return copied


def default_jobs() -> int:
    return max(1, os.cpu_count() or 2)


def log_path_for(spec: BuildSpec) -> Path:
    return paths.log_dir() / f"runtime-build-{spec.name}.log"


def cached(spec: BuildSpec, root: Path | None = None) -> Runtime | None:
    """The finished runtime for spec, if it was built before (no build), with the tools spec asks for."""
    runtime = runtime_from_folder((root or runtimes_dir()) / spec.key, "built")
    if runtime is not None and not set(spec.tools) <= set(runtime.manifest.get("llama_tools") or ()):
        return None
    return runtime


def tool_path(runtime: Runtime, tool: str) -> Path | None:
    """A llama.cpp tool built with the runtime (--tools), or None where it was built without it."""
    path = runtime.folder / TOOLS_DIR / tool
    return path if os.access(path, os.X_OK) else None


def find_tool(tool: str, given: str | None = None, portable_first: bool = False) -> Path | None:
    """A llama.cpp tool: `given` (a path a variable names: used if it runs, else None), else the one built beside a
    cached Vulkan runtime with --tools, the native build first (the binding's own kernels) unless portable_first."""
    if given:
        return Path(given) if os.access(given, os.X_OK) else None
    for portable in ((True, False) if portable_first else (False, True)):
        runtime = cached(BuildSpec("vulkan", portable=portable, tools=TOOLS))
        found = tool_path(runtime, tool) if runtime is not None else None
        if found:
            return found
    return None


def build_runtime(spec: BuildSpec, *, root: Path | None = None, sdist: Path | None = None, jobs: int | None = None,
                  vulkan_include: Path | None = None, fetch_headers: bool = True, rebuild: bool = False,
                  keep_build: bool = False, on_progress: Callable[[float | None, str], None] | None = None,
                  cancelled: Callable[[], bool] | None = None) -> Runtime:
    """Build the runtime (or return the cached one at once). Raises RuntimeBuildError with one sentence.

    on_progress(fraction or None, line) gets every line of cmake's output, with the build's share done where
    the line says it (ninja's [12/345]); cancelled() is asked a few times a second and stops the build
    (BuildCancelled), removing its temporary folder."""
    root = Path(root) if root else runtimes_dir()
    root.mkdir(parents=True, exist_ok=True)
    if not rebuild and (found := cached(spec, root)) is not None:
        return found
    log_file = log_path_for(spec)
    with _locked(root / f".{spec.key}.lock"):
        if not rebuild and (found := cached(spec, root)) is not None:
            return found  # another build of the same runtime finished while this one waited
        with open(log_file, "w", encoding="utf-8") as log:
            return _build_locked(spec, root, sdist, jobs or default_jobs(), vulkan_include, fetch_headers,
                                 keep_build, on_progress, cancelled, log, log_file)


def sdist_for(root: Path, given: Path | None, version: str, log: IO[str]) -> Path:
    """The sdist a build reads: the one given, $HEARTH_LLAMA_SDIST, one already cached, or a download."""
    if given is not None:
        if not Path(given).is_file():
            raise RuntimeBuildError(f"the sdist {given} does not exist.")
        return Path(given)
    configured = env.LLAMA_SDIST.get()
    if configured and Path(configured).is_file():
        return Path(configured)
    # The llama-server build's cache (scripts/build_llama_server.py) may hold the same sdist already.
    shared = [root / "sdist", Path.home() / ".cache" / "hearth-llama-server" / "sdist", paths.cache_dir() / "sdist"]
    return find_sdist(shared, version) or fetch_sdist(root / "sdist", version, log)


def _build_locked(spec, root, sdist, jobs, vulkan_include, fetch_headers, keep_build, on_progress, cancelled,
                  log, log_file) -> Runtime:
    started = time.monotonic()
    tools = check_toolchain(spec, root, vulkan_include, fetch_headers, log)
    try:
        sdist_path = sdist_for(root, sdist, spec.version, log)
    except SourcesError as exc:
        raise RuntimeBuildError(str(exc)) from exc
    work = Path(tempfile.mkdtemp(prefix=f".build-{spec.key}-", dir=root))
    try:
        try:
            source = unpack_llama_cpp(sdist_path, work / "src", spec.version)
        except SourcesError as exc:
            raise RuntimeBuildError(str(exc)) from exc
        build_dir = work / "build"
        configure = ["cmake", "-S", str(source), "-B", str(build_dir), *spec.flags(), *LAYOUT_FLAGS]
        if tools.get("generator"):
            configure += ["-G", tools["generator"]]
        if spec.name == "vulkan":
            configure.append(f"-DVulkan_INCLUDE_DIR={tools['vulkan_include']}")
        else:
            configure.append(f"-DCMAKE_CUDA_COMPILER={tools['nvcc']}")
        env = dict(os.environ)
        env.pop("CMAKE_ARGS", None)  # meant for pip's build of the binding, not for this one
        steps = (("configure", configure),
                 ("build", ["cmake", "--build", str(build_dir), "--config", "Release", "-j", str(jobs),
                            "--target", *spec.targets]))
        for step, cmd in steps:
            output: list[str] = []
            try:
                for line in _lines(cmd, log, cancelled, env=env):
                    output.append(line)
                    if len(output) > 4000:
                        del output[:2000]
                    if on_progress is not None:
                        match = PROGRESS.match(line)
                        fraction = None
                        if match and match.group(1):
                            fraction = int(match.group(1)) / max(1, int(match.group(2)))
                        elif match:
                            fraction = int(match.group(3)) / 100
                        on_progress(fraction, line)
            except subprocess.CalledProcessError:
                raise _failure(step, spec, output, log_file) from None
            except FileNotFoundError as exc:
                raise RuntimeBuildError(f"could not run {cmd[0]} ({exc.strerror}).") from exc
        stage = work / spec.key
        libraries = _stage_libraries(build_dir, stage, spec)
        manifest = {
            "name": spec.name,
            "backend": BACKENDS[spec.name],
            "llama_cpp_python": spec.version,
            "ggml_version": ggml_version(source),
            "sdist_sha256": sha256(sdist_path),
            "flags": list(spec.flags()),
            "llama_tools": list(spec.tools),  # "tools" is the toolchain below
            "cuda_archs": list(spec.cuda_archs),
            "cpu_target": spec.cpu_target,
            "cpu_key": cpu_key() if not spec.portable else None,
            "cpu": machine.cpu_name(),
            "platform": platform.platform(),
            "tools": tools,
            "libraries": libraries,
            "jobs": jobs,
            "build_s": round(time.monotonic() - started, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        write_manifest(stage, manifest)
        final = root / spec.key
        if final.exists():  # a rebuild: the old folder goes only once the new one is complete
            old = root / f".removing-{spec.key}-{os.getpid()}"
            final.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        stage.rename(final)
    finally:
        if not keep_build:
            shutil.rmtree(work, ignore_errors=True)
    log.write(f"built {spec.key} in {time.monotonic() - started:.0f} s\n")
    runtime = runtime_from_folder(final, "built")
    assert runtime is not None, f"{final} has no {MANIFEST}"
    return runtime


def spec_from_args(name: str, arch: str | None = None, portable: bool = False, tools: bool = False) -> BuildSpec:
    """The BuildSpec a command line asks for; CUDA without --arch takes the architectures of the GPUs here."""
    archs = parse_archs(arch)
    if name == "cuda" and not archs:
        archs = visible_cuda_archs()
        if not archs:
            raise RuntimeBuildError("no NVIDIA GPU is visible here to choose the CUDA architectures from; name "
                                    f"them with --arch (e.g. {CUDA_ARCH_HINT}).")
    return BuildSpec(name, cuda_archs=archs, portable=portable, tools=TOOLS if tools else ())


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", help="CUDA architectures, e.g. 86,90 (default: those of the GPUs here)")
    parser.add_argument("--portable", action="store_true",
                        help="for shipping: x86-64-v3 instead of -march=native")
    parser.add_argument("--sdist", type=Path, help=f"a llama-cpp-python sdist already on disk (or ${SDIST_ENV})")
    parser.add_argument("--jobs", "-j", type=int, default=None, help="parallel compile jobs (default: all cores)")
    parser.add_argument("--vulkan-include", type=Path, help=f"newer Vulkan headers (or ${VULKAN_HEADERS_ENV})")
    parser.add_argument("--no-fetch-headers", action="store_true",
                        help="never fetch Debian 13's Vulkan headers when the system's are too old")
    parser.add_argument("--tools", action="store_true",
                        help=f"also build llama.cpp's {', '.join(TOOLS)} in the same tree, into the runtime's "
                        f"{TOOLS_DIR}/ folder (the reference bench quality is checked against; never shipped)")
    parser.add_argument("--rebuild", action="store_true", help="build even if the same build is cached")
    parser.add_argument("--keep-build", action="store_true", help="keep the cmake build folder (for debugging)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.core.making.runtime_build", description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=BUILDABLE)
    parser.add_argument("--print", action="store_true", help="print the cached folder only; rc 1 if not built")
    add_build_arguments(parser)
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args.name, args.arch, args.portable, args.tools)
        runtime = cached(spec)
        if runtime is None and args.print:
            print(f"the {spec.name} runtime ({spec.key}) is not built", file=sys.stderr)
            return 1
        if runtime is None or args.rebuild:
            started = time.monotonic()
            print(f"building the {spec.name} runtime {spec.key} (log: {log_path_for(spec)}) ...", file=sys.stderr,
                  flush=True)
            runtime = build_runtime(spec, sdist=args.sdist, jobs=args.jobs, vulkan_include=args.vulkan_include,
                                    fetch_headers=not args.no_fetch_headers, rebuild=args.rebuild,
                                    keep_build=args.keep_build)
            print(f"built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    except HearthError as exc:
        print(f"runtime_build: {exc}", file=sys.stderr)
        return 1
    print(runtime.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
