"""`hearth doctor` names the GPU that a runtime reaches, not only what this process's CPU binding can do."""

from __future__ import annotations

import json
from pathlib import Path

from app.commands.doctor import gpus_seen

H200 = Path(__file__).resolve().parents[2] / "docs" / "results" / "gpu-h200-2026-12-04.json"


def test_the_h200_seen_through_the_cuda_runtime():
    """On the H200 the report said 'GPU offload: no (this llama.cpp build is CPU-only)' while its cuda runtime's
    probe listed the GPU (the runtimes as doctor --json collected them there)."""
    runtimes = json.loads(H200.read_text())["doctor"]["runtimes"]
    assert gpus_seen(runtimes) == [{"name": "NVIDIA H200", "memory_total_mb": 143156, "runtime": "cuda"}]


def test_a_software_device_or_a_failed_probe_is_no_gpu():
    lavapipe = {"name": "vulkan", "compatible": True, "probe": {"ok": True, "devices": [
        {"description": "llvmpipe (LLVM 15.0.6, 256 bits)", "gpu": True, "software": True, "memory_total_mb": 24105}]}}
    broken = {"name": "cuda", "compatible": True, "probe": {"ok": False, "devices": [
        {"description": "NVIDIA H200", "gpu": True, "software": False, "memory_total_mb": 143156}]}}
    assert gpus_seen([lavapipe, broken]) == []
