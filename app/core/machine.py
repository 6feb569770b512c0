"""Facts about this machine: CPU model and SIMD features, cores, RAM, GPUs.

One place reads them (/proc/cpuinfo on Linux, psutil and platform elsewhere, nvidia-smi for NVIDIA GPUs), so
`hearth doctor`, the benchmarks, the fit check and the test-run header say the same thing. The GPU memory
the engine reports while it runs comes from llama.cpp's own device registry instead
(app/engine/probes/gpu_memory.py): that is what the loaded build can use.
"""

from __future__ import annotations

import functools
import platform
import shutil
import subprocess
import sys

import psutil

# The SIMD features llama.cpp's CPU kernels choose between, as /proc/cpuinfo spells them.
CPU_FLAGS = ("avx", "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16", "f16c",
             "fma", "neon", "asimd", "sve")
_MB = 2**20


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str | None, frozenset[str]]:
    """(model name, flags) from /proc/cpuinfo; (None, empty) where there is none (macOS, Windows)."""
    name, flags = None, set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name") and name is None:
                    name = line.split(":", 1)[1].strip()
                elif line.startswith(("flags", "Features")):
                    flags.update(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, frozenset(flags)


def _sysctl(key: str) -> str | None:
    """macOS: sysctl's answer for one key (the CPU's name and features live there)."""
    if sys.platform != "darwin" or not shutil.which("sysctl"):
        return None
    try:
        out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def cpu_name() -> str:
    return _cpuinfo()[0] or _sysctl("machdep.cpu.brand_string") or platform.processor() or platform.machine()


def cpu_features() -> list[str]:
    """The SIMD features of CPU_FLAGS this CPU has, in that order."""
    flags = set(_cpuinfo()[1])
    if not flags and platform.machine().lower() in ("arm64", "aarch64"):
        flags.add("neon")  # every 64-bit ARM CPU has it; macOS and Windows have no /proc/cpuinfo to say so
    for line in (_sysctl("machdep.cpu.features"), _sysctl("machdep.cpu.leaf7_features")):
        flags.update((line or "").lower().replace(".", "_").split())
    return [f for f in CPU_FLAGS if f in flags]


def physical_cores() -> int | None:
    return psutil.cpu_count(logical=False)


def logical_cores() -> int | None:
    return psutil.cpu_count(logical=True)


def cpu() -> dict:
    """What `hearth doctor` shows (and saves as JSON) for the CPU."""
    return {"name": cpu_name(), "arch": platform.machine(), "features": cpu_features(),
            "physical_cores": physical_cores(), "logical_cores": logical_cores()}


def cpu_summary() -> str:
    """One line: 'AMD EPYC 9B14 (x86_64), 2 physical / 2 logical cores; SIMD: avx, avx2, f16c, fma'."""
    c = cpu()
    return (f"{c['name']} ({c['arch']}), {c['physical_cores']} physical / {c['logical_cores']} logical cores; "
            f"SIMD: {', '.join(c['features']) or 'none detected'}")


def ram_total_mb() -> int:
    return round(psutil.virtual_memory().total / _MB)


def ram_available_mb() -> int:
    return round(psutil.virtual_memory().available / _MB)


def nvidia_gpus() -> list[dict]:
    """[{"name", "total_mb", "free_mb"}] as the NVIDIA driver reports them; [] without nvidia-smi.
    Other vendors' tools are not asked (yet)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        name, _, rest = line.strip().rpartition(", ")  # GPU names may hold commas; the numbers do not
        name, _, total = name.rpartition(", ")
        try:
            gpus.append({"name": name, "total_mb": float(total), "free_mb": float(rest)})
        except ValueError:
            continue
    return gpus


def gpu_names() -> list[str]:
    """'NVIDIA H200, 143771 MiB' per GPU: name and memory, for saved benchmark results."""
    return [f"{g['name']}, {g['total_mb']:.0f} MiB" for g in nvidia_gpus()]
