"""Engine runtimes: the native llama.cpp libraries an engine process loads.

llama-cpp-python loads `libllama` and its `libggml*` libraries from the folder named by LLAMA_CPP_LIB_PATH
when that is set, so the one pinned binding can drive libraries built from the same vendored llama.cpp with
another backend. A runtime is such a folder:

- "cpu": the binding's own libraries (llama_cpp/lib), always present;
- "vulkan", "cuda": built by app/core/making/runtime_build.py from the pinned sdist, or shipped prebuilt inside a
  bundle or .deb (resources/runtimes/).

A built or shipped runtime carries a manifest (MANIFEST, JSON) written after its build finished, so a folder
without one is never taken for a runtime. Where runtimes live: $HEARTH_RUNTIMES_DIR when set (tests and CI
share one cached build across temporary HEARTH_HOMEs), else <data dir>/runtimes; each in
<name>-<llama-cpp-python version>-<flags hash>/.

Which devices a runtime sees, probe_runtime asks a child process (app/engine/probes/runtime_probe.py, named here
as a string only, as app/core/proc.py does): a library that does not load or a driver that crashes must not
take Hearth with it, and a process can load only one runtime.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.core import env
from app.core import machine, paths
from app.core.errors import HearthError
from app.core.making.llama_sources import binding_version
from app.core.proc import EVENT, child_command, child_env, exit_reason, last_event

MANIFEST = "hearth-runtime.json"
RUNTIMES_DIR_ENV = env.RUNTIMES_DIR.name
LIB_PATH_ENV = "LLAMA_CPP_LIB_PATH"
# llama_cpp.mtmd_cpp does not read LLAMA_CPP_LIB_PATH: it opens libmtmd from MTMD_CPP_LIB, else from the binding's
# own folder, whose libmtmd would bring the binding's libllama and libggml into an engine that runs another
# runtime's (two llama.cpp builds in one process), and which a frozen bundle may not have. Both name one folder.
MTMD_LIB_ENV = "MTMD_CPP_LIB"
NAMES = ("cpu", "vulkan", "cuda")
BACKENDS = {"cpu": "CPU", "vulkan": "Vulkan", "cuda": "CUDA"}
# Environment variables that pick devices inside a runtime (passed through to the engine and the probe).
DEVICE_ENV = {"vulkan": "GGML_VK_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}
# Order of preference when more than one runtime sees a real GPU (the issue: CUDA before Vulkan).
PREFERENCE = ("cuda", "vulkan", "cpu")
PROBE_MODULE = "app.engine.probes.runtime_probe"
# Loading a runtime and starting its backend: well under a second for the cpu runtime and lavapipe, a few
# seconds for CUDA's first start (it may compile kernels for an architecture it has only PTX for).
PROBE_TIMEOUT_S = 120


class RuntimeUnavailable(HearthError):
    """A runtime is missing, unusable or cannot be removed (the message says which and why)."""


def _lib_name(base: str) -> str:
    if sys.platform == "win32":
        return f"{base}.dll"
    if sys.platform == "darwin":
        return f"lib{base}.dylib"
    return f"lib{base}.so"


LIBLLAMA = _lib_name("llama")
# The libraries llama_cpp opens by name from LLAMA_CPP_LIB_PATH: libllama, and libmtmd for a model's projector
# (llama_cpp.mtmd_cpp); the others are found through their NEEDED entries.
OPENED_BY_NAME = (LIBLLAMA, _lib_name("mtmd"))


def cpu_key() -> str:
    """This CPU, as far as -march=native cares: a runtime built natively is this CPU's only."""
    raw = "|".join([platform.machine(), machine.cpu_name(), *machine.cpu_features()])
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Runtime:
    name: str                  # cpu | vulkan | cuda
    folder: Path               # the folder LLAMA_CPP_LIB_PATH names
    backend: str               # CPU | Vulkan | CUDA
    version: str               # the llama-cpp-python version its libraries were built from
    origin: str                # "wheel" (the binding's own), "built" (here), "shipped" (bundle / .deb)
    flags: tuple[str, ...] = ()
    manifest: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """The folder's name, unique per name, version and flags (what the build caches by); "cpu" for the
        binding's own."""
        return "cpu" if self.origin == "wheel" else self.folder.name

    @property
    def compatible(self) -> bool:
        """Built from the sources of the binding Hearth runs (anything else may not even load), and, if built
        with -march=native, on this CPU."""
        return self.version == binding_version() and self.incompatible_reason() is None

    def incompatible_reason(self) -> str | None:
        if self.version != binding_version():
            return f"built for llama-cpp-python {self.version}, but Hearth runs {binding_version()}"
        if self.manifest.get("cpu_target") == "native" and self.manifest.get("cpu_key"):
            if self.manifest["cpu_key"] != cpu_key():
                return f"built with -march=native for another CPU ({self.manifest.get('cpu') or 'unknown'})"
        return None

    @property
    def removable(self) -> bool:
        return self.origin == "built"

    def size_bytes(self) -> int:
        total = 0
        for entry in self.folder.iterdir() if self.folder.is_dir() else ():
            if entry.is_file() and not entry.is_symlink():
                total += entry.stat().st_size
        return total

    def env(self, visible_devices: str | None = None) -> dict[str, str]:
        """Environment for an engine (or probe) process that runs on this runtime.

        LLAMA_CPP_LIB_PATH and MTMD_CPP_LIB are always set, also for "cpu" (to the binding's own folder), so
        that a value in Hearth's own environment cannot leak into a child meant for another runtime.
        visible_devices: the backend's device list (GGML_VK_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES), e.g. "0"
        to use Vulkan device 0 even if it is a CPU (lavapipe, which ggml skips by default). Without it, the value in
        Hearth's environment, if any, passes through unchanged."""
        env = {LIB_PATH_ENV: str(self.folder), MTMD_LIB_ENV: str(self.folder)}
        var = DEVICE_ENV.get(self.name)
        if var and visible_devices is not None:
            env[var] = visible_devices
        return env

    def to_json(self) -> dict:
        return {"name": self.name, "backend": self.backend, "version": self.version, "origin": self.origin,
                "folder": str(self.folder), "key": self.key, "compatible": self.compatible,
                "incompatible": self.incompatible_reason(), "size_bytes": self.size_bytes(),
                "flags": list(self.flags), "cpu_target": self.manifest.get("cpu_target"),
                "built": self.manifest.get("built_at"), "build_s": self.manifest.get("build_s"),
                "ggml_version": self.manifest.get("ggml_version")}


# --- where runtimes live --------------------------------------------------------------------------------------

def runtimes_dir() -> Path:
    """Where built runtimes go (and are looked for first): $HEARTH_RUNTIMES_DIR, else <data dir>/runtimes."""
    configured = env.RUNTIMES_DIR.get()
    folder = Path(configured).expanduser() if configured else paths.data_dir() / "runtimes"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shipped_runtimes_dirs() -> list[Path]:
    """Folders of runtimes shipped prebuilt: resources/runtimes/ of a bundle, a .deb, a wheel or a checkout
    (found the way app/core/resources.py finds every shipped file)."""
    from app.core.resources import resources_dir

    try:
        folder = resources_dir() / "runtimes"
    except HearthError:
        return []
    return [folder] if folder.is_dir() else []


def wheel_lib_dir() -> Path | None:
    """The binding's own library folder (llama_cpp/lib), found without importing llama_cpp (which would load
    whatever LLAMA_CPP_LIB_PATH names into this process)."""
    base = getattr(sys, "_MEIPASS", None)
    candidates = []
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "lib" for p in spec.submodule_search_locations]
    if base:
        candidates.append(Path(base) / "llama_cpp" / "lib")
    for folder in candidates:
        if (folder / LIBLLAMA).exists():
            return folder
    return candidates[0] if candidates else None


def files_to_ship(runtime: Runtime) -> list[tuple[Path, str]]:
    """(source file, name in the shipped folder) for a runtime that a bundle or .deb carries: the manifest, the
    libraries the binding opens by name (libllama.so, and libmtmd.so where the runtime has it) and every library under the name the loader asks for (its soname,
    libggml.so.0), each a plain file. A build folder holds each library three times over as symlinks
    (libggml.so -> .so.0 -> .so.0.25.3); a bundle copies files, so only the names something opens travel."""
    if runtime.origin == "wheel":
        raise RuntimeUnavailable("The cpu runtime is the binding's own; it ships with llama-cpp-python.")
    if runtime.manifest.get("cpu_target") == "native":
        raise RuntimeUnavailable(f"The {runtime.name} runtime {runtime.key} was built with -march=native, for this "
                                 "CPU only; build one to ship with `--portable`.")
    folder = runtime.folder
    opened = [name for name in OPENED_BY_NAME if (folder / name).exists()]
    out = [(folder / MANIFEST, MANIFEST), *(((folder / name).resolve(), name) for name in opened)]
    soname = re.compile(r"^lib.+\.so\.\d+$") if sys.platform.startswith("linux") else None
    for entry in sorted(folder.iterdir()):
        if soname is not None and soname.match(entry.name) and not any(entry.name.startswith(n + ".") for n in opened):
            out.append((entry.resolve(), entry.name))
        elif soname is None and entry.suffix in (".dll", ".dylib") and entry.name not in opened:
            out.append((entry.resolve(), entry.name))
    return out


def read_manifest(folder: Path) -> dict | None:
    """A runtime folder's manifest, or None where there is none or it is not a JSON object."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_manifest(folder: Path, manifest: dict) -> None:
    partial = folder / (MANIFEST + ".partial")
    partial.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(folder / MANIFEST)


def runtime_from_folder(folder: Path, origin: str) -> Runtime | None:
    """The runtime in folder if it holds a manifest naming a known runtime and its libllama, else None."""
    manifest = read_manifest(folder)
    if manifest is None:
        return None
    name = manifest.get("name")
    if name not in NAMES or name == "cpu" and origin != "wheel":
        return None
    if not (folder / LIBLLAMA).exists():
        return None
    return Runtime(name=name, folder=folder, backend=str(manifest.get("backend") or BACKENDS[name]),
                   version=str(manifest.get("llama_cpp_python") or "unknown"), origin=origin,
                   flags=tuple(str(f) for f in manifest.get("flags") or ()), manifest=manifest)


def cpu_runtime() -> Runtime:
    folder = wheel_lib_dir()
    if folder is None:
        raise RuntimeUnavailable("llama-cpp-python is not installed, so Hearth has no engine runtime; "
                            "reinstall Hearth.")
    return Runtime(name="cpu", folder=folder, backend="CPU", version=binding_version(), origin="wheel",
                   manifest={"name": "cpu", "backend": "CPU", "llama_cpp_python": binding_version()})


def _folders(root: Path) -> list[Path]:
    try:
        # Newest first: a rebuild with other flags is the one a user most likely wants.
        entries = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []
    return sorted(entries, key=lambda p: (p / MANIFEST).stat().st_mtime if (p / MANIFEST).exists() else 0,
                  reverse=True)


def list_runtimes() -> list[Runtime]:
    """Every runtime: cpu first, then those built here (newest first), then shipped ones."""
    found = [cpu_runtime()]
    try:
        built = [runtimes_dir()]
    except OSError:  # a read-only or full disk: nothing was built there, and the shipped ones still count
        built = []
    for origin, roots in (("built", built), ("shipped", shipped_runtimes_dirs())):
        for root in roots:
            for folder in _folders(root):
                runtime = runtime_from_folder(folder, origin)
                if runtime is not None:
                    found.append(runtime)
    return found


def find_runtime(name: str, compatible_only: bool = True) -> Runtime | None:
    """The runtime to use for a name (cpu | vulkan | cuda), or a folder's key (vulkan-0.3.36-1a2b3c4d5e);
    None where there is none. For a name: a compatible one (built from the binding's own version) built here
    before a shipped one. compatible_only=False also finds one built for another version (to remove it)."""
    for runtime in list_runtimes():
        if name in (runtime.name, runtime.key) and (runtime.compatible or not compatible_only):
            return runtime
    return None


def remove_runtime(name: str) -> list[Runtime]:
    """Delete the runtimes built here with this name (all versions and flags) or this key; returns them.
    The cpu runtime and shipped ones cannot be removed (they belong to the installation)."""
    if name == "cpu":
        raise RuntimeUnavailable("the cpu runtime is llama-cpp-python's own and cannot be removed.")
    runtimes = [r for r in list_runtimes() if name in (r.name, r.key)]
    if not runtimes:
        raise RuntimeUnavailable(f"there is no {name} runtime to remove.")
    removable = [r for r in runtimes if r.removable]
    if not removable:
        raise RuntimeUnavailable(f"the {name} runtime in {runtimes[0].folder} is part of this installation "
                            "and cannot be removed.")
    for runtime in removable:
        # Rename first, then delete: a half-deleted folder must never look like a runtime.
        doomed = runtime.folder.with_name(f".removing-{runtime.folder.name}-{os.getpid()}")
        try:
            runtime.folder.rename(doomed)
        except OSError as exc:
            raise RuntimeUnavailable(f"could not remove {runtime.folder}: {exc.strerror or exc}.") from exc
        shutil.rmtree(doomed, ignore_errors=True)
    return removable


# --- what a runtime can do --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Device:
    """One of ggml's devices as a runtime sees it."""
    index: int                 # in ggml's registry (the CPU is one)
    name: str                  # "Vulkan0", "CUDA0", "CPU"
    description: str           # "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)", the CPU's model
    type: str                  # CPU | GPU | IGPU | ACCEL
    backend: str               # the registry's name: CPU, Vulkan, CUDA
    memory_total_mb: int
    memory_free_mb: int
    software: bool             # a renderer that computes on the CPU (lavapipe): never chosen by default

    @property
    def is_gpu(self) -> bool:
        """A real GPU: worth offloading layers to."""
        return self.backend != "CPU" and self.type in ("GPU", "IGPU") and not self.software

    def to_json(self) -> dict:
        return {"index": self.index, "name": self.name, "description": self.description, "type": self.type,
                "backend": self.backend, "memory_total_mb": self.memory_total_mb,
                "memory_free_mb": self.memory_free_mb, "software": self.software, "gpu": self.is_gpu}


@dataclass(frozen=True)
class RuntimeProbe:
    """What a runtime's libraries said in a child process. ok False: error is one sentence saying why."""
    runtime: str                          # its name (cpu | vulkan | cuda)
    key: str                              # its folder's name
    ok: bool
    error: str | None = None
    devices: tuple[Device, ...] = ()
    gpu_offload: bool = False             # llama_supports_gpu_offload()
    ggml_version: str | None = None
    binding_version: str | None = None
    # For Vulkan: the loader's physical devices, [{"index", "name", "type", "api", "software"}]; "index" is
    # what GGML_VK_VISIBLE_DEVICES takes (ggml lists software devices only when named there).
    vulkan_devices: tuple[dict, ...] = ()
    visible_devices: str | None = None    # the device variable the probe ran with (None: unset)
    probe_s: float = 0.0
    media: bool = False                   # its libmtmd loads: a model's projector (images, sounds) can open

    @property
    def gpus(self) -> list[Device]:
        """The real GPUs it can offload to (software renderers left out)."""
        return [d for d in self.devices if d.is_gpu]

    @property
    def software_devices(self) -> list[Device]:
        return [d for d in self.devices if d.software]

    @property
    def usable(self) -> bool:
        """Loads, and offloads to a real GPU: what choosing a GPU runtime by default asks."""
        return self.ok and self.gpu_offload and bool(self.gpus)

    def hidden_software_vulkan(self) -> list[dict]:
        """Vulkan devices ggml skipped because they are CPUs (lavapipe), with the index that shows them."""
        shown = {d.description for d in self.devices}
        return [d for d in self.vulkan_devices if d.get("software") and d.get("name") not in shown]

    def to_json(self) -> dict:
        return {"runtime": self.runtime, "key": self.key, "ok": self.ok, "error": self.error,
                "gpu_offload": self.gpu_offload, "ggml_version": self.ggml_version,
                "binding_version": self.binding_version, "devices": [d.to_json() for d in self.devices],
                "vulkan_devices": list(self.vulkan_devices), "visible_devices": self.visible_devices,
                "probe_s": self.probe_s}


def _failure_sentence(runtime: Runtime, code: int | None, stderr: str, visible: str | None) -> str:
    var = DEVICE_ENV.get(runtime.name)
    if "Invalid Vulkan device index" in stderr:
        return (f"the {runtime.name} runtime stopped because {var}={visible} names a Vulkan device that "
                "does not exist.")
    last = [line.strip() for line in stderr.splitlines() if line.strip()][-1:]
    detail = f" ({last[0][:300]})" if last and code is not None and code > 0 else ""
    return f"the {runtime.name} runtime in {runtime.folder} cannot be used: loading it crashed, {exit_reason(code)}{detail}."


def probe_runtime(runtime: Runtime, visible_devices: str | None = None,
                  timeout_s: float = PROBE_TIMEOUT_S) -> RuntimeProbe:
    """Load the runtime in a child process and list what it sees. Never raises for a runtime that fails: the
    answer says so in one sentence (ok False, error).

    visible_devices: the backend's device list for the child (GGML_VK_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES),
    e.g. "0" to include lavapipe; None: Hearth's own environment's value, if any, passes through."""
    started = time.perf_counter()
    var = DEVICE_ENV.get(runtime.name)
    env = runtime.env(visible_devices)
    visible = env.get(var) if var and var in env else (os.environ.get(var) if var else None)
    base = {"runtime": runtime.name, "key": runtime.key, "visible_devices": visible}
    args = ["--version", runtime.version]
    if runtime.manifest.get("ggml_version"):
        args += ["--ggml-version", str(runtime.manifest["ggml_version"])]
    try:
        proc = subprocess.run(child_command(PROBE_MODULE, *args), env=child_env(env), capture_output=True,
                              text=True, errors="replace", timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return RuntimeProbe(**base, ok=False, probe_s=round(time.perf_counter() - started, 2),
                            error=f"the {runtime.name} runtime did not answer within {timeout_s:.0f} s "
                                  "(its driver may hang).")
    except OSError as exc:
        return RuntimeProbe(**base, ok=False, error=f"the runtime probe could not start ({exc.strerror or exc}).")
    elapsed = round(time.perf_counter() - started, 2)
    answer = last_event(proc.stdout, "probe", EVENT)
    if answer is None:
        return RuntimeProbe(**base, ok=False, probe_s=elapsed,
                            error=_failure_sentence(runtime, proc.returncode, proc.stderr, visible))
    error = answer.get("error")
    if error:
        error = f"the {runtime.name} runtime in {runtime.folder} cannot be used: {error}."
    devices = tuple(Device(index=int(d.get("index", i)), name=str(d.get("name", "")),
                           description=str(d.get("description", "")), type=str(d.get("type", "")),
                           backend=str(d.get("backend", "")), memory_total_mb=int(d.get("memory_total_mb") or 0),
                           memory_free_mb=int(d.get("memory_free_mb") or 0), software=bool(d.get("software")))
                    for i, d in enumerate(answer.get("devices") or ()))
    return RuntimeProbe(**base, ok=bool(answer.get("ok")) and not error, error=error, devices=devices,
                        gpu_offload=bool(answer.get("gpu_offload")), ggml_version=answer.get("ggml_version"),
                        binding_version=answer.get("binding_version"),
                        vulkan_devices=tuple(answer.get("vulkan_devices") or ()), probe_s=elapsed,
                        media=bool(answer.get("media")))
