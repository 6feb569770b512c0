"""What a benchmark ran on: saved with every result so that runs on different machines compare."""

from __future__ import annotations

import os
import platform
import sys

from app import __version__
from app.core import machine


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def describe_machine() -> dict:
    import llama_cpp

    cpu = machine.cpu()
    offload = bool(llama_cpp.llama_supports_gpu_offload())
    gpus = machine.gpu_names()
    return {
        "cpu": cpu["name"],
        "arch": cpu["arch"],
        "cpu_features": cpu["features"],
        "physical_cores": cpu["physical_cores"],
        "logical_cores": cpu["logical_cores"],
        "ram_total_mb": machine.ram_total_mb(),
        "gpus": gpus,
        "gpu_offload": offload,
        "gpu": (", ".join(gpus) or "GPU offload available") if offload else
               (f"{', '.join(gpus)} (unused: CPU-only llama.cpp build)" if gpus else "none (CPU-only llama.cpp build)"),
        "llama_cpp_python": llama_cpp.__version__,
        "llama_system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(" |"),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "hearth": __version__,
    }
