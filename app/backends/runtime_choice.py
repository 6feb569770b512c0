"""Which engine runtime (app/core/runtimes.py) a new engine process starts on.

A process loads one runtime's libraries for its whole life, so the choice is made here, on the client side,
before the supervisor starts the engine: the runtime's folder goes into the child's LLAMA_CPP_LIB_PATH.

- "auto" (the default): the first runtime that sees a real GPU, CUDA before Vulkan; never a software device
  (lavapipe) unless GGML_VK_VISIBLE_DEVICES names it; else cpu. A runtime remembered as broken on this
  machine (it crashed on a first load) is passed over.
- "cpu", "vulkan", "cuda": that runtime. One that is not there, does not load, or sees no device falls back
  to cpu, and the choice carries one sentence saying so.

Probing a runtime costs a child process (0.3-1 s), so answers are kept for the life of this process; only
runtimes that exist are probed, so a machine with none built pays nothing.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from app.core import runtimes
from app.core.jsonstore import read_json, update_json
from app.core.paths import machine_facts_file

FACTS_KEY = "runtimes_failed"


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

    def gpu_free_mb(self) -> float | None:
        """Free memory of its best device, for the fit estimate; None on the CPU."""
        free = [d.memory_free_mb for d in self.devices]
        return float(max(free)) if free else None

    def describe(self) -> dict:
        return {"name": self.name, "backend": self.runtime.backend, "note": self.note,
                "devices": [d.to_json() for d in self.devices]}


_lock = threading.Lock()
_probes: dict[tuple[str, str | None], runtimes.RuntimeProbe] = {}


def _probe(runtime: runtimes.Runtime) -> runtimes.RuntimeProbe:
    var = runtimes.DEVICE_ENV.get(runtime.name)
    key = (runtime.key, os.environ.get(var) if var else None)
    with _lock:
        if key not in _probes:
            _probes[key] = runtimes.probe_runtime(runtime)
        return _probes[key]


def forget_probes() -> None:
    """Probe again on the next choice (after a runtime was built or removed)."""
    with _lock:
        _probes.clear()


def remembered_failures() -> dict:
    try:
        facts = read_json(machine_facts_file(), {}) or {}
    except OSError:  # a data folder that cannot be made: nothing was remembered
        return {}
    failed = facts.get(FACTS_KEY)
    return failed if isinstance(failed, dict) else {}


def remember_failure(runtime: runtimes.Runtime, detail: str) -> None:
    """A runtime that crashed on a first load is not chosen by "auto" again on this machine (naming it still
    tries it); `hearth runtimes list` shows why."""
    entry = {"detail": detail, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        update_json(machine_facts_file(),
                    lambda facts: {**(facts if isinstance(facts, dict) else {}),
                                   FACTS_KEY: {**((facts or {}).get(FACTS_KEY) or {}), runtime.key: entry}}, {})
    except OSError:
        pass  # a read-only data folder costs the memory of it, nothing else


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
    if not probe.gpu_offload or not [d for d in probe.devices if d.backend != "CPU"]:
        hidden = probe.hidden_software_vulkan()
        extra = (f" (only the software renderer {hidden[0].get('name')}, which "
                 f"{runtimes.DEVICE_ENV['vulkan']}={hidden[0].get('index')} would use)" if hidden else "")
        return _cpu(f"The {asked} runtime sees no GPU{extra}; the model runs on the CPU.")
    return Chosen(runtime, probe)
