"""GPU memory in use, from ggml's device registry (what nvidia-smi and friends show).

llama-cpp-python binds llama.h but not ggml-backend.h, so the four functions
needed are bound here with ctypes. Memory is reported per device type GPU
(discrete) or IGPU, summed over devices, for the whole device: other programs
using the GPU count too, as they do in every system monitor. On a build
without a GPU backend there is no such device and the answer is None.
"""

from __future__ import annotations

import ctypes
import functools

# enum ggml_backend_dev_type
GPU_TYPES = (1, 2)  # GGML_BACKEND_DEVICE_TYPE_GPU, GGML_BACKEND_DEVICE_TYPE_IGPU


@functools.lru_cache(maxsize=1)
def _ggml():
    """The ggml functions, or None where they cannot be found."""
    import llama_cpp.llama_cpp as ll

    candidates = [ll._lib]  # on Linux and macOS its handle resolves symbols of libggml it depends on
    try:
        from llama_cpp._ctypes_extensions import load_shared_library

        candidates += [load_shared_library("ggml", ll._base_path), load_shared_library("ggml-base", ll._base_path)]
    except (OSError, RuntimeError, FileNotFoundError, AttributeError):
        pass
    found = {}
    for name in ("ggml_backend_dev_count", "ggml_backend_dev_get", "ggml_backend_dev_type",
                 "ggml_backend_dev_memory"):
        fn = next((getattr(lib, name) for lib in candidates if hasattr(lib, name)), None)
        if fn is None:
            return None
        found[name] = fn
    found["ggml_backend_dev_count"].restype = ctypes.c_size_t
    found["ggml_backend_dev_count"].argtypes = []
    found["ggml_backend_dev_get"].restype = ctypes.c_void_p
    found["ggml_backend_dev_get"].argtypes = [ctypes.c_size_t]
    found["ggml_backend_dev_type"].restype = ctypes.c_int
    found["ggml_backend_dev_type"].argtypes = [ctypes.c_void_p]
    found["ggml_backend_dev_memory"].restype = None
    found["ggml_backend_dev_memory"].argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                                 ctypes.POINTER(ctypes.c_size_t)]
    return found


@functools.lru_cache(maxsize=1)
def gpu_devices() -> tuple[int, ...]:
    """Handles of the GPU devices this build of llama.cpp can use."""
    fns = _ggml()
    if fns is None:
        return ()
    devices = (fns["ggml_backend_dev_get"](i) for i in range(fns["ggml_backend_dev_count"]()))
    return tuple(d for d in devices if d and fns["ggml_backend_dev_type"](d) in GPU_TYPES)


def gpu_memory_mb() -> dict | None:
    """{"used_mb", "total_mb"} summed over the GPUs, or None without one."""
    devices = gpu_devices()
    if not devices:
        return None
    fns = _ggml()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    used_sum = total_sum = 0
    for device in devices:
        fns["ggml_backend_dev_memory"](device, ctypes.byref(free), ctypes.byref(total))
        used_sum += total.value - free.value
        total_sum += total.value
    return {"used_mb": used_sum / 2**20, "total_mb": total_sum / 2**20}


def device_count() -> int:
    """Devices of any type the registry lists (the CPU is one): a sanity check that the binding works."""
    fns = _ggml()
    return int(fns["ggml_backend_dev_count"]()) if fns else 0


def gpu_free_mb() -> float | None:
    """Free memory of the roomiest GPU this process's llama.cpp libraries can offload to (any vendor's, through
    ggml's registry: CUDA and Vulkan alike), or None without one."""
    devices = gpu_devices()
    if not devices:
        return None
    fns = _ggml()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    best = 0
    for device in devices:
        fns["ggml_backend_dev_memory"](device, ctypes.byref(free), ctypes.byref(total))
        best = max(best, free.value)
    return best / 2**20
