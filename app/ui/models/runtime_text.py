"""Where a model runs and how it is prompted, in the words the load pane, the status bar and the monitor use.

Qt-free: the Models page's worker builds the runtime choices with these (app/ui/models/manager.py), and the
tests read them without a window.

- A runtime choice (the load settings' Runtime box) names the runtime, its device and the device's free
  memory as the runtime's probe saw it (app/core/making/runtimes.py), and says in one sentence why layers stay on
  the CPU where they do: a GPU note that speaks of runtimes, not of rebuilding llama-cpp-python.
- A loaded model's place: "Vulkan · 31/31 layers on llvmpipe" (info["runtime"], info["gpu_layers"]).
- A loaded model's chat format: which one and why (info["chat_format"]), and a base model said as such.
"""

from __future__ import annotations

from pathlib import Path

from app.core.units import human_size

NO_GPU_RUNTIME = ("Every layer runs on the CPU: no GPU runtime is installed. `hearth runtimes build vulkan` builds "
                  "one for any GPU (NVIDIA, AMD, Intel), `hearth runtimes build cuda` a faster one for NVIDIA; "
                  "`hearth runtimes list` shows what is installed.")
BACKEND_NAMES = {"cpu": "CPU", "vulkan": "Vulkan", "cuda": "CUDA"}


def short_device(description: str) -> str:
    """A device's name without its driver's details: "llvmpipe (LLVM 15.0.6, 256 bits)" -> "llvmpipe"."""
    return description.split(" (", 1)[0].strip() or description


def _mb(value) -> str:
    return human_size(float(value) * 2**20) if value else ""


def device_label(device: dict) -> str:
    """"llvmpipe · 12.3 GB free" (free memory where the probe knew it)."""
    name = short_device(device.get("description") or device.get("name") or "a device")
    free = _mb(device.get("memory_free_mb"))
    return f"{name} · {free} free" if free else name


def device_tip(device: dict) -> str:
    parts = [device.get("description") or device.get("name") or "a device"]
    if device.get("memory_total_mb"):
        parts.append(f"{_mb(device.get('memory_free_mb'))} free of {_mb(device['memory_total_mb'])} when Hearth "
                     "last probed the runtime")
    if device.get("software"):
        parts.append("a software renderer that computes on the CPU: slow, for tests")
    return "; ".join(parts)


def choice_row(asked: str, chosen: dict, installed: list[str], offloading: list[str] = ()) -> dict:
    """One entry of the Runtime box.

    asked: auto | cpu | vulkan | cuda; chosen: what choosing it gives ({"name", "backend", "note", "devices"},
    app/backends/runtime_choice.Chosen.describe()); installed: the GPU runtimes that exist here; offloading:
    those of them that see a device to offload to.
    Returns {name, label, tip, offloads, note}: note is the sentence under the GPU layers slider when this
    choice keeps every layer on the CPU."""
    devices = chosen.get("devices") or []
    runs = chosen.get("name") or "cpu"
    offloads = runs != "cpu" and bool(devices)
    where = (f"{chosen.get('backend') or BACKEND_NAMES.get(runs, runs)} on "
             + (device_label(devices[0]) if len(devices) == 1 else f"{len(devices)} devices")) if offloads else "CPU"
    tip = "; ".join(device_tip(d) for d in devices) if offloads else ""
    note = ""
    if not offloads:
        if chosen.get("note"):
            note = chosen["note"]
        elif not installed:
            note = NO_GPU_RUNTIME
        elif asked == "cpu" and offloading:
            note = (f"The cpu runtime computes every layer on the CPU; choose {offloading[0]} to offload layers "
                    "to a GPU.")
        else:  # no installed runtime sees a real GPU
            note = (f"Every layer runs on the CPU: the installed {' and '.join(installed)} runtime"
                    f"{'s see' if len(installed) > 1 else ' sees'} no GPU (`hearth runtimes list` says what "
                    "each one sees).")
    if asked == "auto":
        label = f"auto: {where}"
        tip = ("The first runtime that sees a real GPU (CUDA before Vulkan), else the CPU. Now: " + where
               + (f" ({tip})" if tip else ""))
    elif offloads:
        label = f"{asked} · {where.split(' on ', 1)[1]}"
    elif asked == "cpu":
        label = "cpu"
        tip = "llama.cpp's CPU build, which Hearth installs with llama-cpp-python"
    else:
        label = f"{asked} · sees no GPU"
        tip = note
    return {"name": asked, "label": label, "tip": tip, "offloads": offloads, "note": note}


def placement_text(info: dict | None) -> str:
    """Where a loaded model runs, for the status bar: "Vulkan · 31/31 layers on llvmpipe", "CPU"; "" for a
    remote model or an engine that does not say."""
    if not info or info.get("remote") or not isinstance(info.get("runtime"), dict):
        return ""
    runtime = info["runtime"]
    backend = runtime.get("backend") or BACKEND_NAMES.get(runtime.get("name"), "CPU")
    devices = runtime.get("devices") or []
    if runtime.get("name") == "cpu" or not devices:
        return backend
    total = (info.get("n_layer") or 0) + 1  # llama.cpp counts the output layer as one more
    on = info.get("gpu_layers") or 0
    where = short_device(devices[0].get("description") or devices[0].get("name") or "") if len(devices) == 1 \
        else f"{len(devices)} devices"
    return f"{backend} · {on}/{total} layers on {where}"


def placement_tip(info: dict | None) -> str:
    """The status bar's tooltip: the devices in full, and why the runtime is not the one asked for."""
    if not placement_text(info):
        return ""
    runtime = info["runtime"]
    parts = [device_tip(d) for d in runtime.get("devices") or ()]
    if runtime.get("note"):
        parts.append(runtime["note"])
    return "\n".join(parts) or "Every layer runs on the CPU"


def format_text(info: dict | None) -> str:
    """After a load: which chat format the model is prompted with and why; a base model said as such."""
    fmt = (info or {}).get("chat_format")
    if not isinstance(fmt, dict) or (info or {}).get("remote"):
        return ""
    kind, name = fmt.get("kind"), fmt.get("name") or ""
    # Short: the reason that follows names the template in full.
    what = {"model": "the model's own", "file": Path(name).name, "plain": "plain text"}.get(kind, name)
    text = f"Chat format: {what}. {fmt.get('why') or ''}".strip()
    if fmt.get("base_model") and "base model" not in text:
        text += (" Base model: nothing in the file says it was tuned to chat, so it tends to continue your text "
                 "rather than answer it.")
    return text
