"""`hearth runtimes` and the runtimes in `hearth doctor`, as a user runs them (real subprocesses).

The Vulkan cases use the runtime tests/run.sh caches in $HEARTH_RUNTIMES_DIR and skip where it is not built.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from app.core.making import runtime_build as rb
from app.core.making import runtimes as rt
from tests.commands.test_cli import hearth

CACHE = Path(os.environ.get(rt.RUNTIMES_DIR_ENV) or Path.home() / ".cache" / "hearth-runtimes")


@pytest.fixture
def empty_root(tmp_path) -> dict:
    return {rt.RUNTIMES_DIR_ENV: str(tmp_path / "runtimes")}


@pytest.fixture
def cached_vulkan() -> dict:
    env = {rt.RUNTIMES_DIR_ENV: str(CACHE)}
    # The portable build: the one tests/run.sh makes (and the bundle ships); a -march=native one is not made there.
    if not CACHE.is_dir() or rb.cached(rb.BuildSpec("vulkan", portable=True), CACHE) is None:
        pytest.skip("the Vulkan runtime is not built; `python -m app.core.making.runtime_build vulkan` builds it "
                    "(tests/run.sh does)")
    return env


def test_list_json_has_the_cpu_runtime_with_its_devices(empty_root):
    proc = hearth("runtimes", "list", "--json", env_extra=empty_root)
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)
    assert [e["name"] for e in entries] == ["cpu"]
    cpu = entries[0]
    for key in ("backend", "version", "folder", "size_bytes", "origin", "compatible", "probe"):
        assert key in cpu, key
    assert cpu["probe"]["ok"] and cpu["probe"]["gpu_offload"] is False
    assert cpu["probe"]["devices"][0]["type"] == "CPU" and cpu["probe"]["devices"][0]["memory_total_mb"] > 0

    text = hearth("runtimes", "list", env_extra=empty_root)
    assert text.returncode == 0 and text.stdout.startswith("cpu     CPU     llama-cpp-python 0.3.36")
    assert "free of" in text.stdout and "GPU offload: no" in text.stdout
    fast = hearth("runtimes", "list", "--no-probe", "--json", env_extra=empty_root)
    assert "probe" not in json.loads(fast.stdout)[0]


def test_mistakes_are_one_sentence_and_exit_code_1(empty_root):
    cases = {
        ("rm", "cpu"): "hearth: the cpu runtime is llama-cpp-python's own and cannot be removed.\n",
        ("rm", "vulkan"): "hearth: there is no vulkan runtime to remove.\n",
        ("build", "cuda", "--arch", "hopper"): "hearth: 'hopper' is not a CUDA architecture;",
        ("build", "vulkan", "--arch", "90"): "hearth: --arch names CUDA architectures; it applies to `build cuda` only.\n",
    }
    for args, start in cases.items():
        proc = hearth("runtimes", *args, env_extra=empty_root)
        assert proc.returncode == 1, (args, proc.stderr)
        assert proc.stderr.startswith(start) and proc.stderr.count("\n") == 1, proc.stderr
    missing = hearth("runtimes", "build", "cuda", "--arch", "90", env_extra={**empty_root, "CUDACXX": "/nonexistent/nvcc"})
    assert missing.returncode == 1 and "nvcc (the CUDA toolkit) is not installed" in missing.stderr
    assert "building" not in missing.stderr  # the missing tool is said before a long build is announced
    assert not list(Path(empty_root[rt.RUNTIMES_DIR_ENV]).glob("cuda-*"))


def test_doctor_lists_the_runtimes(empty_root):
    proc = hearth("doctor", "--json", env_extra=empty_root)
    assert proc.returncode == 0, proc.stderr
    runtimes = json.loads(proc.stdout)["runtimes"]
    assert runtimes[0]["name"] == "cpu" and runtimes[0]["probe"]["ok"]
    text = hearth("doctor", env_extra=empty_root)
    assert "Runtimes: cpu only (`hearth runtimes build vulkan` builds a GPU runtime)" in text.stdout


def test_a_second_build_is_the_cached_one_at_once(cached_vulkan):
    started = time.monotonic()
    proc = hearth("runtimes", "build", "vulkan", "--portable", "--json", env_extra=cached_vulkan)
    assert time.monotonic() - started < 60
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    assert entry["built_now"] is False and entry["name"] == "vulkan" and entry["probe"]["ok"]
    assert entry["elapsed_s"] < 30


def test_list_and_doctor_show_lavapipe_as_hidden_then_as_a_software_gpu(cached_vulkan):
    env = {k: v for k, v in cached_vulkan.items()}
    hidden = hearth("runtimes", "list", env_extra=env)
    assert hidden.returncode == 0, hidden.stderr
    assert "vulkan  Vulkan  llama-cpp-python 0.3.36, built here" in hidden.stdout
    if "llvmpipe" not in hidden.stdout:
        pytest.skip("no software Vulkan device (Mesa's lavapipe: apt install mesa-vulkan-drivers)")
    assert "[software, hidden; GGML_VK_VISIBLE_DEVICES=0 shows it]" in hidden.stdout
    shown = hearth("runtimes", "list", "--json", "--devices", "0", env_extra=env)
    vulkan = next(e for e in json.loads(shown.stdout) if e["name"] == "vulkan")
    devices = [d for d in vulkan["probe"]["devices"] if d["backend"] == "Vulkan"]
    assert vulkan["probe"]["gpu_offload"] and devices and devices[0]["software"] and not devices[0]["gpu"]
    doctor = hearth("doctor", env_extra={**env, "GGML_VK_VISIBLE_DEVICES": "0"})
    assert "[software GPU (not chosen by default)]" in doctor.stdout, doctor.stdout


def test_rm_removes_a_runtime_built_here(tmp_path):
    root = tmp_path / "runtimes"
    folder = root / "vulkan-0.3.36-0123456789"
    folder.mkdir(parents=True)
    (folder / rt.LIBLLAMA).write_bytes(b"")
    rt.write_manifest(folder, {"name": "vulkan", "backend": "Vulkan", "llama_cpp_python": "0.3.36"})
    env = {rt.RUNTIMES_DIR_ENV: str(root)}
    listed = hearth("runtimes", "list", env_extra=env)
    assert "its libraries do not load" in listed.stdout and listed.returncode == 0
    proc = hearth("runtimes", "rm", "vulkan", env_extra=env)
    assert proc.returncode == 0 and proc.stdout == f"removed vulkan-0.3.36-0123456789 ({folder})\n"
    assert not folder.exists()
