"""Which engine runtime (app/core/making/runtimes.py) a new engine process starts on.

A process loads one runtime's libraries for its whole life, so the choice is made here, on the client side,
before the supervisor starts the engine: the runtime's folder goes into the child's LLAMA_CPP_LIB_PATH.

- "auto" (the default): the first runtime that sees a real GPU, CUDA before Vulkan; never a software device
  (lavapipe) unless GGML_VK_VISIBLE_DEVICES names it; else cpu. A runtime remembered as broken on this
  machine (it crashed on a first load) is passed over.
- "cpu", "vulkan", "cuda": that runtime. One that is not there, does not load, or sees no device falls back
  to cpu, and the choice carries one sentence saying so.

Probing a runtime costs a child process (0.3-1 s), so an answer is kept in this process and in the machine
facts (per runtime build and device variable); only runtimes that exist are probed, so a machine with none
built pays nothing.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from app.core.making import runtimes
from app.core.store.jsonstore import is_object, read_json, update_json
from app.core.paths import machine_facts_file

FACTS_KEY = "runtimes_failed"
PROBES_KEY = "runtime_probes"


@dataclass(frozen=True)
class Chosen:
    runtime: runtimes.Runtime
    probe: runtimes.RuntimeProbe | None
    note: str | None = None  # a sentence for the user when the choice was not what was asked

    @property
    def name(self) -> str:
        return self.runtime.name

    def env(self) -> dict[str, str]:
        env = self.runtime.env(self.probe.visible_devices if self.probe else None)
        if self.name == "vulkan" and any(d.software for d in self.devices):
            # ggml-vulkan's fused operations crash lavapipe (Mesa 22.3) now and then when consecutive batches
            # differ in size, as speculation's calibration does: 3 crashes in 4 runs, none in 6 with fusion off.
            # Real GPUs keep it (it is faster there); the GPU check measures them.
            env["GGML_VK_DISABLE_FUSION"] = "1"
        return env

    @property
    def devices(self) -> list[runtimes.Device]:
        """The devices it offloads to (a software one only when it was named)."""
        if self.probe is None or not self.probe.gpu_offload:
            return []
        return [d for d in self.probe.devices if d.backend != "CPU"]

    def describe(self) -> dict:
        return {"name": self.name, "backend": self.runtime.backend, "note": self.note,
                "devices": [d.to_json() for d in self.devices]}


_lock = threading.Lock()
_probes: dict[tuple[str, str | None], runtimes.RuntimeProbe] = {}


def _probe(runtime: runtimes.Runtime) -> runtimes.RuntimeProbe:
    """The runtime's probe: from this process's memory, else from the machine facts (a window's start must not
    wait for a child process before its engine starts: that cost 0.5-1 s), else probed now and kept. What
    is kept is the devices a runtime has; their free memory, which changes, the engine reads itself."""
    var = runtimes.DEVICE_ENV.get(runtime.name)
    visible = os.environ.get(var) if var else None
    key = (runtime.key, visible)
    with _lock:
        if key not in _probes:
            stored = f"{runtime.key}|{visible}|{_manifest_stamp(runtime)}"  # a rebuilt runtime is probed anew
            kept = (_facts().get(PROBES_KEY) or {}).get(stored)
            probe = _probe_from_json(kept) if isinstance(kept, dict) else None
            if probe is None:
                probe = runtimes.probe_runtime(runtime)
                if probe.ok:  # a failure is probed again next time: a driver may have been installed
                    _keep(PROBES_KEY, stored, probe.to_json())
            _probes[key] = probe
        return _probes[key]


def _manifest_stamp(runtime: runtimes.Runtime) -> int:
    try:
        return (runtime.folder / runtimes.MANIFEST).stat().st_mtime_ns
    except OSError:
        return 0


def _probe_from_json(data: dict) -> runtimes.RuntimeProbe | None:
    try:
        devices = tuple(runtimes.Device(index=int(d["index"]), name=d["name"], description=d["description"],
                                        type=d["type"], backend=d["backend"],
                                        memory_total_mb=int(d["memory_total_mb"]),
                                        memory_free_mb=int(d["memory_free_mb"]), software=bool(d["software"]))
                        for d in data.get("devices", ()))
        return runtimes.RuntimeProbe(runtime=data["runtime"], key=data["key"], ok=bool(data["ok"]),
                                     error=data.get("error"), devices=devices,
                                     gpu_offload=bool(data.get("gpu_offload")), ggml_version=data.get("ggml_version"),
                                     binding_version=data.get("binding_version"),
                                     vulkan_devices=tuple(data.get("vulkan_devices") or ()),
                                     visible_devices=data.get("visible_devices"))
    except (KeyError, TypeError, ValueError):
        return None


def _facts() -> dict:
    try:
        facts = read_json(machine_facts_file(), {}, valid=is_object)
    except OSError:  # a data folder that cannot be made: nothing was remembered
        return {}
    return facts if isinstance(facts, dict) else {}


def _keep(section: str, key: str, value) -> None:
    try:
        update_json(machine_facts_file(),
                    lambda facts: {**(facts if isinstance(facts, dict) else {}),
                                   section: {**((facts or {}).get(section) or {}), key: value}}, {},
                    valid=is_object)
    except OSError:
        pass  # a read-only data folder costs the memory of it, nothing else


def remembered_failures() -> dict:
    failed = _facts().get(FACTS_KEY)
    return failed if isinstance(failed, dict) else {}


def remember_failure(runtime: runtimes.Runtime, detail: str) -> None:
    """A runtime that crashed on a first load is not chosen by "auto" again on this machine (naming it still
    tries it); `hearth runtimes list` shows why."""
    _keep(FACTS_KEY, runtime.key, {"detail": detail, "when": time.strftime("%Y-%m-%d %H:%M:%S")})


def _cpu(note: str | None = None) -> Chosen:
    return Chosen(runtimes.cpu_runtime(), None, note)


def choose(asked: str = "auto") -> Chosen:
    """The runtime for an engine that should run on `asked` (auto | cpu | vulkan | cuda)."""
    asked = (asked or "auto").lower()
    if asked == "cpu":
        return _cpu()
    if asked == "auto":
        failed = remembered_failures()
        for name in runtimes.PREFERENCE[:-1]:
            runtime = runtimes.find_runtime(name)
            if runtime is None or runtime.key in failed:
                continue
            probe = _probe(runtime)
            if probe.usable or (probe.ok and probe.gpu_offload and probe.software_devices
                                and probe.visible_devices is not None):  # a software device the user named
                return Chosen(runtime, probe)
        return _cpu()
    if asked not in runtimes.NAMES:
        return _cpu(f"There is no engine runtime '{asked}' (cpu, vulkan or cuda); the model runs on the CPU.")
    runtime = runtimes.find_runtime(asked)
    if runtime is None:
        return _cpu(f"The {asked} runtime is not installed (hearth runtimes build {asked}); "
                    "the model runs on the CPU.")
    probe = _probe(runtime)
    if not probe.ok:
        return _cpu(f"{probe.error[0].upper()}{probe.error[1:]} The model runs on the CPU.")
    chosen = Chosen(runtime, probe)
    if not chosen.devices:
        hidden = probe.hidden_software_vulkan()
        extra = (f" (only the software renderer {hidden[0].get('name')}, which "
                 f"{runtimes.DEVICE_ENV['vulkan']}={hidden[0].get('index')} would use)" if hidden else "")
        return _cpu(f"The {asked} runtime sees no GPU{extra}; the model runs on the CPU.")
    return chosen


def fit_on(path, n_ctx: int | None, kv_type: str, runtime: str = "auto", draft: str | None = None,
           n_parallel: int = 1):
    """The memory fit (app/core/library/fit.py's FitEstimate) on the runtime a load would choose: its device's free memory
    as the runtime's probe read it (any vendor's Vulkan device, not only what nvidia-smi sees), named in the
    verdict; the cpu runtime has none. The window's load settings and `hearth models fit` both ask here, so
    neither loads llama.cpp to learn whether it can offload. draft: the draft model the load holds beside it."""
    from app.core.library.fit import estimate_fit

    best = max(choose(runtime).devices, key=lambda d: d.memory_free_mb, default=None)
    from app.core.library.projectors import chosen_projector

    # The projector opened beside the model at load (the one paired in its folder): its weights are held too.
    held = {"draft": draft, "n_parallel": n_parallel, "projector": chosen_projector(path, None)[0]}
    if best is None or not best.memory_free_mb:
        return estimate_fit(path, n_ctx=n_ctx, kv_type=kv_type, gpu_available_mb=None, **held)
    return estimate_fit(path, n_ctx=n_ctx, kv_type=kv_type, gpu_available_mb=float(best.memory_free_mb),
                        gpu_device=best.description or best.name, **held)
