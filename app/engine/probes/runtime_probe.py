"""The runtime probe's child: load a runtime's libraries and say what they can do.

Started by app/core/making/runtimes.py:probe_runtime with LLAMA_CPP_LIB_PATH naming the runtime's folder (and the
backend's device variable, GGML_VK_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES, passed through). It imports the
binding, which loads those libraries, checks that they are the binding's own version, and lists ggml's
devices with their memory. It answers with one JSON line ({"ev": "probe", ...}) and exits; a library that
does not load is an answer too. A crash (a driver, an illegal instruction) is the parent's to describe.

For a Vulkan runtime it also lists the Vulkan loader's physical devices, with their type, before ggml starts:
ggml skips devices of type CPU (Mesa's lavapipe/llvmpipe) unless GGML_VK_VISIBLE_DEVICES names them, and
the index to name is the loader's, which only this list shows.

    python -m app.engine.probes.runtime_probe [--version V] [--ggml-version G]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import sys

from app.core.proc import emit, keep_stdout_for_events

# enum ggml_backend_dev_type
DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "IGPU", 3: "ACCEL", 4: "META"}
# VkPhysicalDeviceType
VK_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
# Renderers that draw with the CPU while calling themselves GPUs (ggml-vulkan reports every device it uses as
# GPU or IGPU, lavapipe included).
SOFTWARE_NAMES = ("llvmpipe", "lavapipe", "swiftshader", "softpipe")
_MB = 2**20


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:400] or type(exc).__name__


def vulkan_physical_devices() -> list[dict] | None:
    """The Vulkan loader's devices in its order (the indices GGML_VK_VISIBLE_DEVICES takes); None where there
    is no loader or no instance can be created."""
    name = ctypes.util.find_library("vulkan") or "libvulkan.so.1"
    try:
        vk = ctypes.CDLL(name)
    except OSError:
        return None

    class InstanceCreateInfo(ctypes.Structure):
        _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                    ("pApplicationInfo", ctypes.c_void_p), ("enabledLayerCount", ctypes.c_uint32),
                    ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                    ("ppEnabledExtensionNames", ctypes.c_void_p)]

    vk.vkCreateInstance.restype = ctypes.c_int
    vk.vkCreateInstance.argtypes = [ctypes.POINTER(InstanceCreateInfo), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    vk.vkEnumeratePhysicalDevices.restype = ctypes.c_int
    vk.vkEnumeratePhysicalDevices.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p]
    vk.vkGetPhysicalDeviceProperties.restype = None
    vk.vkGetPhysicalDeviceProperties.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    vk.vkDestroyInstance.restype = None
    vk.vkDestroyInstance.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

    info = InstanceCreateInfo(sType=1)  # VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
    instance = ctypes.c_void_p()
    if vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance)) != 0:
        return None
    try:
        count = ctypes.c_uint32()
        if vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None) != 0:
            return None
        handles = (ctypes.c_void_p * count.value)()
        if vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles) not in (0, 5):  # 5: VK_INCOMPLETE
            return None
        devices = []
        for index in range(count.value):
            # VkPhysicalDeviceProperties: apiVersion, driverVersion, vendorID, deviceID, deviceType (u32 each),
            # deviceName[256], ... then the limits; a generous buffer holds the whole struct.
            props = ctypes.create_string_buffer(4096)
            vk.vkGetPhysicalDeviceProperties(handles[index], props)
            raw = props.raw
            api = int.from_bytes(raw[0:4], sys.byteorder)
            kind = VK_TYPES.get(int.from_bytes(raw[16:20], sys.byteorder), "other")
            device_name = raw[20:276].split(b"\0", 1)[0].decode("utf-8", "replace")
            devices.append({"index": index, "name": device_name, "type": kind,
                            "api": f"{api >> 22}.{(api >> 12) & 0x3FF}.{api & 0xFFF}",
                            "software": kind == "cpu" or is_software_name(device_name)})
        return devices
    finally:
        vk.vkDestroyInstance(instance, None)


def is_software_name(text: str) -> bool:
    low = text.lower()
    return any(name in low for name in SOFTWARE_NAMES)


def _ggml_functions(ll) -> dict:
    """ggml-backend.h's device functions from the libraries the binding loaded (llama-cpp-python binds llama.h
    only), as app/engine/probes/gpu_memory.py binds them."""
    candidates = [ll._lib]
    from llama_cpp._ctypes_extensions import load_shared_library

    for base in ("ggml", "ggml-base"):
        try:
            candidates.append(load_shared_library(base, ll._base_path))
        except (OSError, RuntimeError, FileNotFoundError):
            pass
    sigs = {
        "ggml_backend_dev_count": (ctypes.c_size_t, []),
        "ggml_backend_dev_get": (ctypes.c_void_p, [ctypes.c_size_t]),
        "ggml_backend_dev_name": (ctypes.c_char_p, [ctypes.c_void_p]),
        "ggml_backend_dev_description": (ctypes.c_char_p, [ctypes.c_void_p]),
        "ggml_backend_dev_type": (ctypes.c_int, [ctypes.c_void_p]),
        "ggml_backend_dev_memory": (None, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                           ctypes.POINTER(ctypes.c_size_t)]),
        "ggml_backend_dev_backend_reg": (ctypes.c_void_p, [ctypes.c_void_p]),
        "ggml_backend_reg_name": (ctypes.c_char_p, [ctypes.c_void_p]),
        "ggml_version": (ctypes.c_char_p, []),
    }
    found = {}
    for name, (restype, argtypes) in sigs.items():
        fn = next((getattr(lib, name) for lib in candidates if hasattr(lib, name)), None)
        if fn is None:
            continue
        fn.restype, fn.argtypes = restype, argtypes
        found[name] = fn
    return found


def _text(raw: bytes | None) -> str:
    return (raw or b"").decode("utf-8", "replace")


def ggml_devices(fns: dict, vulkan: list[dict] | None) -> list[dict]:
    vulkan_software = {d["name"] for d in vulkan or () if d["software"]}
    devices = []
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    for i in range(fns["ggml_backend_dev_count"]()):
        dev = fns["ggml_backend_dev_get"](i)
        if not dev:
            continue
        kind = DEVICE_TYPES.get(fns["ggml_backend_dev_type"](dev), "other")
        reg = fns["ggml_backend_dev_backend_reg"](dev) if "ggml_backend_dev_backend_reg" in fns else None
        backend = _text(fns["ggml_backend_reg_name"](reg)) if reg and "ggml_backend_reg_name" in fns else ""
        name = _text(fns["ggml_backend_dev_name"](dev))
        description = _text(fns["ggml_backend_dev_description"](dev))
        fns["ggml_backend_dev_memory"](dev, ctypes.byref(free), ctypes.byref(total))
        # A device that computes on the CPU while its backend is not the CPU's: lavapipe under Vulkan.
        cpu_backend = backend == "CPU" or not backend and kind == "CPU"
        software = not cpu_backend and (kind == "CPU" or is_software_name(f"{name} {description}")
                                        or description in vulkan_software)
        devices.append({"index": i, "name": name, "description": description, "type": kind, "backend": backend,
                        "memory_total_mb": round(total.value / _MB), "memory_free_mb": round(free.value / _MB),
                        "software": software})
    return devices


def probe(expect_version: str | None, expect_ggml: str | None) -> dict:
    lib_path = os.environ.get("LLAMA_CPP_LIB_PATH")
    vulkan = None
    if lib_path and any(name.startswith("libggml-vulkan") for name in _listdir(lib_path)):
        vulkan = vulkan_physical_devices()
    try:
        import llama_cpp
        import llama_cpp.llama_cpp as ll
    except Exception as exc:  # the binding raises bare Exception/RuntimeError/OSError for a library that fails
        return {"ok": False, "stage": "load", "error": f"its libraries do not load ({_one_line(exc)})",
                "vulkan_devices": vulkan}
    result = {"binding_version": llama_cpp.__version__, "lib_path": str(ll._base_path), "vulkan_devices": vulkan}
    if expect_version and llama_cpp.__version__ != expect_version:
        return {**result, "ok": False, "stage": "version",
                "error": f"it was built for llama-cpp-python {expect_version}, but the binding here is "
                         f"{llama_cpp.__version__}; rebuild it"}
    fns = _ggml_functions(ll)
    result["ggml_version"] = _text(fns["ggml_version"]()) if "ggml_version" in fns else None
    if expect_ggml and result["ggml_version"] and result["ggml_version"] != expect_ggml:
        return {**result, "ok": False, "stage": "version",
                "error": f"its libraries are ggml {result['ggml_version']}, not the {expect_ggml} it was built "
                         "from; rebuild it"}
    try:
        result["gpu_offload"] = bool(llama_cpp.llama_supports_gpu_offload())
        result["system_info"] = _text(llama_cpp.llama_print_system_info()).strip(" |")
        missing = [n for n in ("ggml_backend_dev_count", "ggml_backend_dev_get", "ggml_backend_dev_name",
                               "ggml_backend_dev_description", "ggml_backend_dev_type", "ggml_backend_dev_memory")
                   if n not in fns]
        if missing:
            return {**result, "ok": False, "stage": "devices",
                    "error": f"its libraries lack ggml's device functions ({', '.join(missing)})"}
        result["devices"] = ggml_devices(fns, vulkan)
    except Exception as exc:
        return {**result, "ok": False, "stage": "devices", "error": f"listing its devices failed ({_one_line(exc)})"}
    result["media"] = _libmtmd_loads()
    unknown = _unknown_vulkan_indices(vulkan)
    if unknown:
        # ggml-vulkan prints this, drops its whole backend and carries on on the CPU: say it instead.
        listed = ", ".join(f"{d['index']} = {d['name']}" for d in vulkan) or "none"
        return {**result, "ok": False, "stage": "devices",
                "error": f"GGML_VK_VISIBLE_DEVICES={os.environ['GGML_VK_VISIBLE_DEVICES']} names Vulkan device "
                         f"{', '.join(unknown)}, which does not exist (the devices here: {listed})"}
    return {**result, "ok": True, "stage": "done", "error": None}


def _libmtmd_loads() -> bool:
    """Whether this runtime's libmtmd (a model's projector: images and sounds) loads from MTMD_CPP_LIB, the
    folder Runtime.env names beside LLAMA_CPP_LIB_PATH. Without it the runtime answers text only."""
    try:
        from llama_cpp import mtmd_cpp

        return bool(mtmd_cpp.mtmd_default_marker())
    except Exception:  # the binding raises FileNotFoundError, or RuntimeError for a library that does not load
        return False


def _unknown_vulkan_indices(vulkan: list[dict] | None) -> list[str]:
    value = os.environ.get("GGML_VK_VISIBLE_DEVICES")
    if vulkan is None or not value:
        return []
    return [part for part in value.replace(",", " ").split() if not part.isdigit() or int(part) >= len(vulkan)]


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def child_main(argv: list[str] | None = None) -> int:
    keep_stdout_for_events()
    parser = argparse.ArgumentParser(prog="runtime_probe")
    parser.add_argument("--version", dest="expect_version")
    parser.add_argument("--ggml-version", dest="expect_ggml")
    args = parser.parse_args(argv)
    emit("probe", **probe(args.expect_version, args.expect_ggml))
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
