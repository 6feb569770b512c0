"""Machine facts: one reader for the CPU, RAM and NVIDIA GPUs."""

from __future__ import annotations

import subprocess

from app.core import machine


def test_cpu_summary_is_one_line_with_the_simd_features():
    line = machine.cpu_summary()
    assert "\n" not in line and "SIMD:" in line and machine.cpu_name() in line
    for feature in machine.cpu_features():
        assert feature in machine.CPU_FLAGS and feature in line


def test_cpu_facts_have_the_keys_doctor_prints():
    cpu = machine.cpu()
    assert set(cpu) == {"name", "arch", "features", "physical_cores", "logical_cores"}
    assert machine.ram_total_mb() >= machine.ram_available_mb() > 0


def test_nvidia_smi_output_is_read_once_for_names_and_free_memory(monkeypatch):
    out = "NVIDIA H200, 143771, 140000\nGPU, with, commas, 1024, 512\n"
    monkeypatch.setattr(machine.shutil, "which", lambda _name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(machine.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out, stderr=""))
    assert machine.nvidia_gpus() == [{"name": "NVIDIA H200", "total_mb": 143771.0, "free_mb": 140000.0},
                                     {"name": "GPU, with, commas", "total_mb": 1024.0, "free_mb": 512.0}]
    assert machine.gpu_names() == ["NVIDIA H200, 143771 MiB", "GPU, with, commas, 1024 MiB"]


def test_no_nvidia_smi_means_no_gpus(monkeypatch):
    monkeypatch.setattr(machine.shutil, "which", lambda _name: None)
    assert machine.nvidia_gpus() == [] and machine.gpu_names() == []
