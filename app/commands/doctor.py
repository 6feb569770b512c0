"""`hearth doctor`: what this machine and this llama.cpp build can do."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys

import psutil

from app import __version__
from app.core import paths
from app.core.bundled import bundled_model_path
from app.core.errors import HearthError

CPU_FLAGS = ("avx", "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16", "f16c",
             "fma", "neon", "asimd", "sve")


def register(sub) -> None:
    p = sub.add_parser("doctor", help="show what this machine and llama.cpp build can do")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _cpu() -> dict:
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith(("flags", "Features")):
                    flags.update(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"name": name, "arch": platform.machine(), "features": [f for f in CPU_FLAGS if f in flags],
            "physical_cores": psutil.cpu_count(logical=False), "logical_cores": psutil.cpu_count(logical=True)}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect() -> dict:
    import llama_cpp

    from app.engine import probe

    try:
        model = str(bundled_model_path())
    except HearthError as exc:
        model = None
        model_error = str(exc)
    report = {
        "hearth": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu(),
        "ram_total_mb": round(psutil.virtual_memory().total / 2**20),
        "ram_available_mb": round(psutil.virtual_memory().available / 2**20),
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "mmap": bool(llama_cpp.llama_supports_mmap()),
        "mlock": bool(llama_cpp.llama_supports_mlock()),
        "llama_system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(" |"),
        "versions": {d: _version(d) for d in ("llama-cpp-python", "gguf", "huggingface-hub", "PySide6-Essentials",
                                               "pyqtgraph", "psutil", "platformdirs")},
        "bundled_model": model,
        "paths": paths.all_paths(),
    }
    if model is None:
        report["bundled_model_error"] = model_error
        report["extra_bufts"] = probe.cached_result()
    else:
        report["extra_bufts"] = probe.extra_bufts_decision(model)
    return report


def run(args: argparse.Namespace) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    cpu = report["cpu"]
    extra = report["extra_bufts"] or {}
    lines = [
        f"Hearth {report['hearth']} on Python {report['python']} ({report['platform']})",
        f"CPU:        {cpu['name']} ({cpu['arch']}), {cpu['physical_cores']} physical / {cpu['logical_cores']} logical cores",
        f"Features:   {', '.join(cpu['features']) or 'none detected'}",
        f"RAM:        {report['ram_total_mb']} MB total, {report['ram_available_mb']} MB available",
        f"GPU offload: {'yes' if report['gpu_offload'] else 'no (this llama.cpp build is CPU-only; see README for a CUDA build)'}",
        f"Extra buffer types (AMX/repack): {'on' if extra.get('ok') else 'off'} - {extra.get('detail', 'not probed')}",
        f"llama.cpp:  {report['llama_system_info']}",
        "Versions:   " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v),
        f"Bundled model: {report['bundled_model'] or report.get('bundled_model_error')}",
    ]
    lines += [f"{k.capitalize() + ':':11} {v}" for k, v in report["paths"].items()]
    print("\n".join(lines))
    return 0
