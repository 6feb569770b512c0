"""Engine runtimes: what one is, where they live, the cached build, and the probe in a child process.

The Vulkan tests use the runtime tests/run.sh builds into $HEARTH_RUNTIMES_DIR (default
~/.cache/hearth-runtimes) and Mesa's lavapipe as the device; they skip, saying so, where it is not built.
No test here builds a runtime (that takes ~25 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from app.backends import runtime_choice
from app.core.making import runtime_build as rb
from app.core.making import runtimes as rt
from app.core.making.llama_sources import binding_version, find_sdist

REAL_PATH = os.environ.get("PATH", "")
CACHE = Path(os.environ.get(rt.RUNTIMES_DIR_ENV) or Path.home() / ".cache" / "hearth-runtimes")
NOT_BUILT = ("the Vulkan runtime is not built; `python -m app.core.making.runtime_build vulkan` builds it "
             "(tests/run.sh does, into $HEARTH_RUNTIMES_DIR)")


def lavapipe_runtime() -> rt.Runtime:
    """The Vulkan runtime tests/run.sh builds into CACHE, where lavapipe is there to run it; else the test skips."""
    runtime = rt.find_runtime("vulkan") if CACHE.is_dir() else None
    if runtime is None:
        pytest.skip(NOT_BUILT)
    probe = rt.probe_runtime(runtime, visible_devices="0")
    if not (probe.ok and probe.software_devices):
        pytest.skip(f"no lavapipe device here ({probe.error or 'mesa-vulkan-drivers is not installed'})")
    return runtime


@pytest.fixture
def runtimes_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "runtimes"
    monkeypatch.setenv(rt.RUNTIMES_DIR_ENV, str(root))
    return root


def make_runtime_folder(root: Path, key: str, manifest: dict, lib: bytes | Path = b"") -> Path:
    """A runtime folder as a build leaves it: libraries, then the manifest."""
    folder = root / key
    folder.mkdir(parents=True)
    if isinstance(lib, Path):
        for entry in lib.iterdir():
            (folder / entry.name).symlink_to(entry)
    else:
        (folder / rt.LIBLLAMA).write_bytes(lib)
    rt.write_manifest(folder, manifest)
    return folder


def vulkan_manifest(**extra) -> dict:
    return {"name": "vulkan", "backend": "Vulkan", "llama_cpp_python": binding_version(), **extra}


@pytest.fixture
def vulkan(monkeypatch) -> rt.Runtime:
    """The cached Vulkan runtime, with no device variable inherited from the environment."""
    monkeypatch.setenv(rt.RUNTIMES_DIR_ENV, str(CACHE))
    monkeypatch.delenv("GGML_VK_VISIBLE_DEVICES", raising=False)
    runtime = rt.find_runtime("vulkan") if CACHE.is_dir() else None
    if runtime is None:
        pytest.skip(NOT_BUILT)
    return runtime


# --- what a runtime is and where runtimes live -----------------------------------------------------------------

def test_the_cpu_runtime_is_the_bindings_own_and_always_listed_first(runtimes_root):
    runtimes = rt.list_runtimes()
    cpu = runtimes[0]
    assert (cpu.name, cpu.backend, cpu.origin, cpu.key) == ("cpu", "CPU", "wheel", "cpu")
    assert (cpu.folder / rt.LIBLLAMA).is_file() and cpu.folder.name == "lib"
    assert cpu.version == binding_version() == "0.3.36" and cpu.compatible and not cpu.removable
    # Always named, so that a LLAMA_CPP_LIB_PATH in Hearth's own environment cannot leak into a cpu engine; libmtmd
    # (a projector) from the same folder, which llama_cpp.mtmd_cpp reads from MTMD_CPP_LIB only.
    assert cpu.env() == {"LLAMA_CPP_LIB_PATH": str(cpu.folder), "MTMD_CPP_LIB": str(cpu.folder)}
    assert rt.find_runtime("cpu") == cpu and rt.find_runtime("vulkan") is None
    assert cpu.size_bytes() > 1_000_000


def test_a_folder_is_a_runtime_only_with_its_manifest_and_libllama(runtimes_root):
    runtimes_root.mkdir()
    (runtimes_root / "vulkan-0.3.36-half").mkdir()
    (runtimes_root / "vulkan-0.3.36-half" / rt.LIBLLAMA).write_bytes(b"")  # libraries copied, no manifest yet
    make_runtime_folder(runtimes_root, ".build-vulkan-0.3.36-abc-x", vulkan_manifest())  # a build's temp folder
    nolib = make_runtime_folder(runtimes_root, "vulkan-0.3.36-nolib", vulkan_manifest())
    (nolib / rt.LIBLLAMA).unlink()
    make_runtime_folder(runtimes_root, "cpu-0.3.36-x", {"name": "cpu", "llama_cpp_python": binding_version()})
    (runtimes_root / "junk").mkdir()
    (runtimes_root / "junk" / rt.MANIFEST).write_text("[1, 2]")
    assert [r.name for r in rt.list_runtimes()] == ["cpu"]

    folder = make_runtime_folder(runtimes_root, "vulkan-0.3.36-1234567890",
                                 vulkan_manifest(flags=["-DGGML_VULKAN=ON"], cpu_target="portable"))
    found = rt.find_runtime("vulkan")
    assert found is not None and found.folder == folder and found.key == "vulkan-0.3.36-1234567890"
    assert (found.backend, found.origin, found.flags, found.removable) == ("Vulkan", "built", ("-DGGML_VULKAN=ON",), True)
    assert rt.find_runtime(found.key) == found
    assert found.env("0") == {"LLAMA_CPP_LIB_PATH": str(folder), "MTMD_CPP_LIB": str(folder),
                              "GGML_VK_VISIBLE_DEVICES": "0"}
    assert json.loads(json.dumps(found.to_json()))["folder"] == str(folder)


def test_a_runtime_for_another_binding_or_cpu_is_found_only_to_be_removed(runtimes_root):
    make_runtime_folder(runtimes_root, "vulkan-0.3.1-aaaa", vulkan_manifest(llama_cpp_python="0.3.1"))
    assert rt.find_runtime("vulkan") is None
    stale = rt.find_runtime("vulkan", compatible_only=False)
    assert stale is not None and not stale.compatible
    assert "built for llama-cpp-python 0.3.1, but Hearth runs 0.3.36" in stale.incompatible_reason()
    chosen = runtime_choice.choose("vulkan")  # asked for by name: the CPU, and a sentence saying why
    assert chosen.name == "cpu" and chosen.note == ("The vulkan runtime is not installed (hearth runtimes build "
                                                    "vulkan); the model runs on the CPU.")
    make_runtime_folder(runtimes_root, "vulkan-0.3.36-other-cpu",
                        vulkan_manifest(cpu_target="native", cpu_key="not-this-cpu", cpu="Some Other CPU"))
    assert rt.find_runtime("vulkan") is None
    assert "for another CPU (Some Other CPU)" in rt.find_runtime("vulkan-0.3.36-other-cpu", False).incompatible_reason()
    assert "no engine runtime 'rocm'" in runtime_choice.choose("rocm").note


def test_remove_deletes_the_ones_built_here_and_refuses_cpu_and_shipped(runtimes_root, tmp_path, monkeypatch):
    a = make_runtime_folder(runtimes_root, "vulkan-0.3.36-aaaa", vulkan_manifest())
    b = make_runtime_folder(runtimes_root, "vulkan-0.3.1-bbbb", vulkan_manifest(llama_cpp_python="0.3.1"))
    keep = make_runtime_folder(runtimes_root, "cuda-0.3.36-cccc",
                               {"name": "cuda", "backend": "CUDA", "llama_cpp_python": binding_version()})
    removed = rt.remove_runtime("vulkan")
    assert sorted(r.key for r in removed) == ["vulkan-0.3.1-bbbb", "vulkan-0.3.36-aaaa"]
    assert not a.exists() and not b.exists() and keep.exists()
    assert [p.name for p in runtimes_root.iterdir()] == ["cuda-0.3.36-cccc"]  # no half-deleted folder left
    with pytest.raises(rt.RuntimeUnavailable, match="no vulkan runtime to remove"):
        rt.remove_runtime("vulkan")
    with pytest.raises(rt.RuntimeUnavailable, match="llama-cpp-python's own and cannot be removed"):
        rt.remove_runtime("cpu")
    rt.remove_runtime("cuda-0.3.36-cccc")
    assert not keep.exists()

    # A runtime shipped with the installation (resources/runtimes/ of a bundle or .deb) is listed, not removed.
    resources = tmp_path / "resources"
    shipped = make_runtime_folder(resources / "runtimes", "vulkan-0.3.36-ship", vulkan_manifest(cpu_target="portable"))
    monkeypatch.setattr("app.core.resources.resources_dir", lambda: resources)
    assert rt.find_runtime("vulkan").origin == "shipped"
    with pytest.raises(rt.RuntimeUnavailable, match="part of this installation"):
        rt.remove_runtime("vulkan")
    assert shipped.exists()
    built = make_runtime_folder(runtimes_root, "vulkan-0.3.36-dddd", vulkan_manifest())
    assert rt.find_runtime("vulkan").folder == built  # one built here comes before a shipped one


# --- the build: its key, its cache, its errors -----------------------------------------------------------------

def test_the_build_is_keyed_by_version_and_flags():
    vulkan = rb.BuildSpec("vulkan")
    assert vulkan.key == rb.BuildSpec("vulkan").key and vulkan.key.startswith(f"vulkan-{binding_version()}-")
    flags = vulkan.flags()
    for flag in ("-DGGML_VULKAN=ON", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                 "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_CURL=OFF", "-DCMAKE_BUILD_TYPE=Release",
                 "-DGGML_NATIVE=ON"):
        assert flag in flags
    # libmtmd beside libllama: the runtime's engine opens a projector too.
    assert vulkan.targets == ("llama", "ggml", "ggml-base", "ggml-cpu", "mtmd", "ggml-vulkan")
    portable = rb.BuildSpec("vulkan", portable=True)
    assert portable.key != vulkan.key and "-DGGML_NATIVE=OFF" in portable.flags()
    assert rb.BuildSpec("vulkan", version="0.3.35").key != vulkan.key


def test_llama_cpp_s_tools_are_built_on_request_under_the_same_key(runtimes_root):
    """--tools adds llama-perplexity (bench quality's reference, #33) to the same cmake tree; the libraries are the
    same, so the key is too, and a runtime asked for with its tools but cached without them is built again."""
    plain, with_tools = rb.BuildSpec("vulkan", portable=True), rb.BuildSpec("vulkan", portable=True, tools=rb.TOOLS)
    assert with_tools.key == plain.key
    assert with_tools.targets == (*plain.targets, "llama-perplexity", "llama-mtmd-cli")
    assert with_tools.flags() == plain.flags()
    folder = make_runtime_folder(runtimes_root, plain.key, vulkan_manifest(flags=list(plain.flags())))
    assert rb.cached(plain) is not None and rb.cached(with_tools) is None
    rt.write_manifest(folder, vulkan_manifest(flags=list(plain.flags()), llama_tools=list(rb.TOOLS)))
    assert rb.cached(with_tools) is not None and rb.cached(plain) is not None
    assert rb.tool_path(rb.cached(plain), "llama-perplexity") is None  # listed, but its file is not there
    with pytest.raises(rb.RuntimeBuildError, match="makes the tools llama-perplexity, llama-mtmd-cli, not llama-server"):
        rb.BuildSpec("vulkan", tools=("llama-server",))


def test_cuda_architectures_are_parsed_checked_and_part_of_the_key():
    assert rb.parse_archs("sm_90, 86;120a 90") == ("90", "86", "120a")
    assert rb.parse_archs(None) == ()
    for bad in ("hopper", "9", "sm_", ","):
        with pytest.raises(rb.RuntimeBuildError, match="CUDA architecture|names no architecture"):
            rb.parse_archs(bad)
    spec = rb.BuildSpec("cuda", cuda_archs=("86", "90"))
    assert "-DGGML_CUDA=ON" in spec.flags() and "-DCMAKE_CUDA_ARCHITECTURES=86;90" in spec.flags()
    assert spec.targets[-1] == "ggml-cuda"
    assert spec.key != rb.BuildSpec("cuda", cuda_archs=("90",)).key
    with pytest.raises(rb.RuntimeBuildError, match="needs its GPU architectures; name them with --arch"):
        rb.BuildSpec("cuda")
    with pytest.raises(rb.RuntimeBuildError, match="applies to `build cuda` only"):
        rb.BuildSpec("vulkan", cuda_archs=("90",))
    with pytest.raises(rb.RuntimeBuildError, match="builds the vulkan and cuda runtimes, not 'rocm'"):
        rb.BuildSpec("rocm")


@pytest.mark.skipif(rb.find_nvcc() is None, reason="nvcc is not installed here")
def test_nvcc_is_asked_which_architectures_it_builds(runtimes_root, monkeypatch):
    tools = rb.check_toolchain(rb.BuildSpec("cuda", cuda_archs=("90",)), runtimes_root)
    assert tools["nvcc"] and tools["cuda"]
    assert "90" in rb.nvcc_archs(tools["nvcc"])
    with pytest.raises(rb.RuntimeBuildError, match=r"cannot build for sm_50; it builds for .*90"):
        rb.check_toolchain(rb.BuildSpec("cuda", cuda_archs=("50", "90")), runtimes_root)
    monkeypatch.setenv("CUDACXX", str(runtimes_root / "no-nvcc"))
    with pytest.raises(rb.RuntimeBuildError, match=r"nvcc \(the CUDA toolkit\) is not installed \(CUDACXX names .*"
                                                  r"apt install nvidia-cuda-toolkit"):
        rb.check_toolchain(rb.BuildSpec("cuda", cuda_archs=("90",)), runtimes_root)


def _path_with(tmp_path: Path, *tools: str) -> str:
    """A PATH that has only these tools (the real ones, linked), in a folder of its own."""
    folder = Path(tempfile.mkdtemp(prefix="bin-", dir=tmp_path))
    for tool in tools:
        found = shutil.which(tool, path=REAL_PATH)
        if found:
            (folder / tool).symlink_to(found)
    return str(folder)


def test_missing_tools_are_named_with_their_debian_packages(runtimes_root, tmp_path, monkeypatch):
    spec = rb.BuildSpec("vulkan")
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", _path_with(tmp_path))
    with pytest.raises(rb.RuntimeBuildError, match=r"^cmake is not installed; install it \(Debian: apt install cmake\)\.$"):
        rb.check_toolchain(spec, runtimes_root)
    if shutil.which("cmake", path=REAL_PATH) is None:
        return
    monkeypatch.setenv("PATH", _path_with(tmp_path, "cmake"))
    with pytest.raises(rb.RuntimeBuildError, match=r"^no C/C\+\+ compiler .*apt install build-essential\)\.$"):
        rb.check_toolchain(spec, runtimes_root)
    monkeypatch.setenv("PATH", _path_with(tmp_path, "cmake", "c++", "cc"))
    with pytest.raises(rb.RuntimeBuildError, match=r"glslc.*apt install glslc spirv-headers libvulkan-dev\)\.$"):
        rb.check_toolchain(spec, runtimes_root)


def test_vulkan_headers_are_checked_for_what_this_llama_cpp_uses(tmp_path, monkeypatch):
    old = tmp_path / "old" / "vulkan"
    old.mkdir(parents=True)
    (old / "vulkan_core.h").write_text("#define VK_HEADER_VERSION 239\n")
    (old / "vulkan.hpp").write_text("")
    assert rb.vulkan_header_version(old.parent) == "1.?.239" and not rb.vulkan_headers_usable(old.parent)
    with pytest.raises(rb.RuntimeBuildError, match="holds no usable Vulkan headers"):
        rb.vulkan_include_dir(tmp_path, old.parent, fetch=False)
    monkeypatch.setenv(rb.VULKAN_HEADERS_ENV, str(old.parent))
    with pytest.raises(rb.RuntimeBuildError, match="holds no usable Vulkan headers"):
        rb.vulkan_include_dir(tmp_path, None, fetch=False)
    monkeypatch.delenv(rb.VULKAN_HEADERS_ENV)
    fetched = rb.fetched_headers_dir(CACHE) / "usr" / "include"
    if rb.vulkan_headers_usable(Path("/usr/include")):
        assert rb.vulkan_include_dir(tmp_path, None, fetch=False) == Path("/usr/include")
    else:  # Debian 12: too old, and the sentence says what to do
        with pytest.raises(rb.RuntimeBuildError, match=r"too old for this llama\.cpp.*--vulkan-include"):
            rb.vulkan_include_dir(tmp_path, None, fetch=False)
    if rb.vulkan_headers_usable(fetched):  # what the cached build fetched (Debian 13's)
        assert rb.vulkan_header_version(fetched).startswith("1.4.")
        assert rb.vulkan_include_dir(CACHE, None, fetch=False) == fetched


def test_a_failed_step_is_one_sentence_naming_the_package_or_the_first_error(tmp_path):
    spec = rb.BuildSpec("vulkan")
    log = tmp_path / "build.log"
    missing = ["CMake Error at /usr/share/cmake-3.25/Modules/FindPackageHandleStandardArgs.cmake:230 (message):",
               "  Could NOT find Vulkan (missing: glslc) (found version \"1.3.239\")"]
    assert str(rb._failure("configure", spec, missing, log)) == (
        f"the vulkan runtime cannot be built: glslc is missing (Debian: apt install glslc); the log is {log}.")
    spirv = ['CMake Error at ggml/src/ggml-vulkan/CMakeLists.txt:14 (find_package):',
             '  Could not find a package configuration file provided by "SPIRV-Headers"']
    assert "apt install spirv-headers" in str(rb._failure("configure", spec, spirv, log))
    compile_error = ["[12/400] Building CXX object x.o", "x.cpp:10:5: error: 'foo' was not declared", "ninja: build stopped"]
    assert str(rb._failure("build", spec, compile_error, log)) == (
        f"the vulkan runtime's build failed (x.cpp:10:5: error: 'foo' was not declared); the whole log is {log}.")


def test_a_cached_build_returns_at_once_without_any_tool(runtimes_root, tmp_path, monkeypatch):
    spec = rb.BuildSpec("vulkan")
    folder = make_runtime_folder(runtimes_root, spec.key, vulkan_manifest(flags=list(spec.flags())))
    monkeypatch.setenv("PATH", _path_with(tmp_path))  # no cmake, no compiler: a build would fail at once
    started = time.monotonic()
    runtime = rb.build_runtime(spec)
    assert time.monotonic() - started < 1.0
    assert runtime.folder == folder and rb.cached(spec) == runtime
    assert rb.main(["vulkan", "--print"]) == 0
    with pytest.raises(rb.RuntimeBuildError, match="cmake is not installed"):
        rb.build_runtime(spec, rebuild=True)
    assert rb.cached(spec) == runtime  # a failed rebuild leaves the finished runtime as it was
    assert rb.main(["vulkan", "--print", "--portable"]) == 1


def _sdist() -> Path | None:
    return find_sdist([CACHE / "sdist", Path.home() / ".cache" / "hearth-llama-server" / "sdist"], binding_version())


@pytest.mark.slow
def test_a_cancelled_build_leaves_nothing_that_looks_finished(runtimes_root):
    sdist = _sdist()
    if sdist is None:
        pytest.skip("the llama-cpp-python sdist is not cached here (the Vulkan build caches it)")
    headers = rb.fetched_headers_dir(CACHE) / "usr" / "include"
    try:
        rb.check_toolchain(rb.BuildSpec("vulkan"), runtimes_root,
                           vulkan_include=headers if rb.vulkan_headers_usable(headers) else None, fetch_headers=False)
    except rb.RuntimeBuildError as exc:
        pytest.skip(f"the Vulkan build cannot start here: {exc}")
    lines: list[str] = []
    with pytest.raises(rb.BuildCancelled, match="cancelled"):
        rb.build_runtime(rb.BuildSpec("vulkan"), sdist=sdist, fetch_headers=False,
                         vulkan_include=headers if rb.vulkan_headers_usable(headers) else None,
                         on_progress=lambda fraction, line: lines.append(line), cancelled=lambda: bool(lines))
    assert lines and lines[0]  # cmake had started
    assert [p for p in runtimes_root.iterdir() if p.is_dir()] == []  # the temporary folder is gone
    assert [r.name for r in rt.list_runtimes()] == ["cpu"]


def test_two_builds_of_one_runtime_take_turns(runtimes_root):
    """The second waits for the first's lock, then finds its result instead of building again."""
    spec = rb.BuildSpec("vulkan")
    runtimes_root.mkdir(parents=True)
    results = []
    with rb._locked(runtimes_root / f".{spec.key}.lock"):
        waiter = threading.Thread(target=lambda: results.append(rb.build_runtime(spec)))
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and not results  # it waits for the lock
        make_runtime_folder(runtimes_root, spec.key, vulkan_manifest())  # the first build finishes
    waiter.join(timeout=10)
    assert results and results[0].key == spec.key


# --- the probe -------------------------------------------------------------------------------------------------

def test_probing_the_cpu_runtime_lists_the_cpu():
    probe = rt.probe_runtime(rt.cpu_runtime())
    assert probe.ok and probe.error is None and not probe.gpu_offload, probe
    assert probe.binding_version == "0.3.36" and probe.ggml_version
    cpu = [d for d in probe.devices if d.backend == "CPU"]
    assert cpu and cpu[0].type == "CPU" and cpu[0].memory_total_mb > 0 and not cpu[0].software
    assert not probe.gpus and not probe.usable
    assert json.loads(json.dumps(probe.to_json()))["devices"][0]["backend"] == "CPU"


def test_a_runtime_whose_library_is_garbage_is_one_sentence(runtimes_root):
    folder = make_runtime_folder(runtimes_root, "vulkan-0.3.36-garbage", vulkan_manifest())  # an empty libllama.so
    probe = rt.probe_runtime(rt.find_runtime("vulkan"))
    assert not probe.ok and not probe.devices
    assert probe.error.startswith(f"the vulkan runtime in {folder} cannot be used: its libraries do not load (")
    assert probe.error.endswith(".") and "\n" not in probe.error and "Traceback" not in probe.error


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to make a crashing library with")
def test_a_runtime_that_crashes_while_loading_is_one_sentence(runtimes_root, tmp_path):
    source = tmp_path / "boom.c"
    source.write_text("#include <stdlib.h>\n__attribute__((constructor)) static void boom(void) { abort(); }\n")
    lib = tmp_path / rt.LIBLLAMA
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    folder = make_runtime_folder(runtimes_root, "vulkan-0.3.36-crash", vulkan_manifest(), lib.read_bytes())
    probe = rt.probe_runtime(rt.find_runtime("vulkan"))
    assert not probe.ok
    assert probe.error == (f"the vulkan runtime in {folder} cannot be used: loading it crashed, "
                           "it was stopped by SIGABRT."), probe.error


def test_libraries_of_another_version_are_refused_after_loading(runtimes_root):
    cpu = rt.cpu_runtime()
    make_runtime_folder(runtimes_root, "vulkan-0.3.36-wrong", vulkan_manifest(ggml_version="0.0.1"), cpu.folder)
    probe = rt.probe_runtime(rt.find_runtime("vulkan"))
    assert not probe.ok and probe.ggml_version and probe.ggml_version != "0.0.1"
    assert probe.error.endswith(f"its libraries are ggml {probe.ggml_version}, not the 0.0.1 it was built from; "
                                "rebuild it.")
    older = rt.Runtime(name="vulkan", folder=cpu.folder, backend="Vulkan", version="0.3.1", origin="built")
    probe = rt.probe_runtime(older)
    assert not probe.ok and "built for llama-cpp-python 0.3.1, but the binding here is 0.3.36; rebuild it." in probe.error


def test_choosing_takes_cpu_when_no_runtime_sees_a_gpu(runtimes_root):
    make_runtime_folder(runtimes_root, "vulkan-0.3.36-garbage", vulkan_manifest())
    chosen = runtime_choice.choose("auto")
    assert chosen.name == "cpu" and chosen.note is None


# --- on the Vulkan runtime, with lavapipe ------------------------------------------------------------------------

def test_the_vulkan_runtime_manifest_says_how_it_was_built(vulkan):
    manifest = vulkan.manifest
    assert manifest["name"] == "vulkan" and manifest["llama_cpp_python"] == binding_version()
    assert "-DGGML_VULKAN=ON" in manifest["flags"] and manifest["ggml_version"]
    assert manifest["tools"]["glslc"] and manifest["tools"]["vulkan_headers"]
    assert manifest["build_s"] > 0 and manifest["sdist_sha256"]
    files = {entry["file"] for entry in manifest["libraries"]}
    assert {"libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so", "libggml-vulkan.so"} <= {
        p.name for p in vulkan.folder.iterdir()}
    assert files and all((vulkan.folder / f).is_file() for f in files)


def test_lavapipe_is_a_software_device_shown_only_when_named(vulkan):
    hidden = rt.probe_runtime(vulkan)
    assert hidden.ok, hidden.error
    software = [d for d in hidden.vulkan_devices if d["software"]]
    if not software:
        pytest.skip("no software Vulkan device (Mesa's lavapipe: apt install mesa-vulkan-drivers)")
    assert "llvmpipe" in software[0]["name"] and software[0]["type"] == "cpu"
    assert not hidden.software_devices and not hidden.gpus  # ggml skips a CPU-type Vulkan device by default
    assert hidden.hidden_software_vulkan() == software

    shown = rt.probe_runtime(vulkan, visible_devices=str(software[0]["index"]))
    assert shown.ok and shown.gpu_offload and shown.visible_devices == "0", shown
    vk = [d for d in shown.devices if d.backend == "Vulkan"]
    assert len(vk) == 1 and "llvmpipe" in vk[0].description and vk[0].software and not vk[0].is_gpu
    assert vk[0].memory_total_mb > 0 and 0 < vk[0].memory_free_mb <= vk[0].memory_total_mb
    assert not shown.usable  # a software device never makes a runtime the default


def test_choosing_never_takes_lavapipe_unless_told(vulkan, monkeypatch):
    """What a new engine starts on (app/backends/runtime_choice.py): auto passes a software device over unless
    GGML_VK_VISIBLE_DEVICES names it."""
    software = [d for d in rt.probe_runtime(vulkan).vulkan_devices if d["software"]]
    if not software:
        pytest.skip("no software Vulkan device (Mesa's lavapipe: apt install mesa-vulkan-drivers)")
    assert runtime_choice.choose("auto").name == "cpu"
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", str(software[0]["index"]))
    chosen = runtime_choice.choose("auto")
    assert chosen.runtime == vulkan and chosen.devices and all(d.software for d in chosen.devices)
    assert chosen.env() == {"LLAMA_CPP_LIB_PATH": str(vulkan.folder), "MTMD_CPP_LIB": str(vulkan.folder),
                            "GGML_VK_VISIBLE_DEVICES": "0", "GGML_VK_DISABLE_FUSION": "1"}


def test_a_device_index_that_does_not_exist_is_one_sentence(vulkan):
    probe = rt.probe_runtime(vulkan, visible_devices="7")
    assert not probe.ok and probe.visible_devices == "7"
    assert probe.error.startswith(f"the vulkan runtime in {vulkan.folder} cannot be used: "
                                  "GGML_VK_VISIBLE_DEVICES=7 names Vulkan device 7, which does not exist "
                                  "(the devices here: "), probe.error
    assert probe.error.endswith(").") and "\n" not in probe.error


def test_a_shipped_runtime_carries_each_library_once_under_the_name_the_loader_opens(runtimes_root, tmp_path):
    """#28: the bundle copies files, so a build folder's symlink chains (libggml.so -> .so.0 -> .so.0.25.3) must not
    become three copies of a 29 MB library; what the binding opens (libllama.so, libmtmd.so) and what each
    library's NEEDED names (its soname, libggml.so.0) travel, once each. A -march=native build is this CPU's
    only: never shipped."""
    folder = runtimes_root / "vulkan-0.3.36-ship"
    folder.mkdir(parents=True)
    for base, version in (("llama", "0.5.0"), ("mtmd", "0.5.0"), ("ggml", "0.25.3"), ("ggml-base", "0.25.3"),
                          ("ggml-vulkan", "0.25.3")):
        real = folder / f"lib{base}.so.{version}"
        real.write_bytes(base.encode())
        soname = folder / f"lib{base}.so.{version.split('.')[0]}"
        soname.symlink_to(real.name)
        (folder / f"lib{base}.so").symlink_to(soname.name)
    rt.write_manifest(folder, vulkan_manifest(cpu_target="portable"))
    runtime = rt.runtime_from_folder(folder, "built")
    shipped = {name: source.read_bytes() if name != rt.MANIFEST else None for source, name in rt.files_to_ship(runtime)}
    assert shipped == {rt.MANIFEST: None, "libllama.so": b"llama", "libmtmd.so": b"mtmd", "libggml.so.0": b"ggml",
                       "libggml-base.so.0": b"ggml-base", "libggml-vulkan.so.0": b"ggml-vulkan"}
    rt.write_manifest(folder, vulkan_manifest(cpu_target="native"))
    with pytest.raises(rt.RuntimeUnavailable, match="-march=native, for this CPU only; build one to ship with "
                                                    "`--portable`"):
        rt.files_to_ship(rt.runtime_from_folder(folder, "built"))
