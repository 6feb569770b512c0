#!/usr/bin/env python3
"""The GPU check of issue #28: prepared on a machine without a GPU, run on one with an NVIDIA GPU.

The device machine this project is sometimes lent (one H200, 16 cores, Python 3.12, CUDA 13's nvcc, no network,
15 minutes in all, at most 10 a call, 64 MiB carried a call) cannot download anything, and the pinned sdist
(77 MB) and the bundled model (98 MB) are each too big to carry. So:

  here:   python scripts/gpu_check.py pack
          .gpu/: llama.cpp from the pinned sdist without the folders Hearth's build skips, as an sdist-shaped
          tarball; cp312 wheels of what Hearth needs there and that machine's image lacks; llama-cpp-python as
          installed here (its Python files and CPU libraries: the cpu runtime there); the bundled model's
          tokenizer alone (a GGUF without tensors). About 40 MB.
  there:  python3 scripts/gpu_check.py build     (carry .gpu; about 6 minutes with 16 cores; timeout_s 600)
          `hearth runtimes build cuda --arch 90 --tools --keep-build`, Hearth's own build of the CUDA runtime
          for sm_90, then llama-bench and llama-server in the same tree, against the same libraries.
  there:  python3 scripts/gpu_check.py bench     (carry .gpu; right after, while the machine is still warm: it
                                                  keeps .gpu-work, where the build is)
          random-weight models written there in F16 and Q4_0 (a 1.1B llama of TinyLlama's shape, and one of the
          bundled model's shape, both with its tokenizer: speed does not depend on the values), then
          `hearth bench` at 0, 25, 50, 75 and 100% of the layers beside llama-bench of the same build,
          `hearth bench serve --parallel 4` against `llama-server -np 4`, and `hearth bench spec` fully offloaded.

Each step prints as it goes, and writes its log and JSON results under $OUT (or .gpu/out). Before device time
is spent: `bench --dry-run` runs the bench step here on the CPU runtime with small models; a rehearsal runs it as
there, with only the device image's packages and the carried ones (a Python 3.12 venv holding those) and the CPU
libraries in the runtime's place: HEARTH_GPU_CHECK_LIB=<the binding's lib folder> ... bench --quick --small.
Not covered: the Vulkan runtime on the NVIDIA driver's Vulkan device (its build needs glslc, which that machine
lacks, and a prebuilt Vulkan runtime is too big to carry beside the rest).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARRY = ROOT / ".gpu"  # ignored by git (.gitignore); carried to the device machine whole
SOURCES = CARRY / "llama-src.tar.gz"
VOCAB = CARRY / "vocab.gguf"
WHEELS = CARRY / "wheels"
PKGS = CARRY / "pkgs"  # llama-cpp-python as installed here: its Python files, metadata and CPU libraries
# Made there: the installed wheels, Hearth's home, the runtimes, the models. Beside .gpu, not in it: a second call
# carries .gpu again, which replaces that folder there, and an ignored folder not carried is kept between calls.
WORK = ROOT / ".gpu-work"
ARCH = "90"  # the H100 and H200

# What Hearth needs for these commands that the device image (listed in the device library's KINDS.md) lacks,
# at the versions installed here. The image has numpy, psutil, jinja2, httpx, anyio, h11, click, uvloop,
# huggingface-hub, pyyaml, tqdm, requests and sentencepiece.
WHEEL_PACKAGES = ("gguf", "platformdirs", "starlette", "uvicorn", "httptools", "diskcache")  # diskcache: the binding imports it
PYTHON_THERE = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
# The figures' shapes: TinyLlama 1.1B (the 22 layers of the issue's H200 table) and the bundled SmolLM2-135M.
BIG = {"n_embd": 2048, "n_layer": 22, "n_ff": 5632, "n_head": 32, "n_head_kv": 4}
SMALL = {"n_embd": 576, "n_layer": 30, "n_ff": 1536, "n_head": 9, "n_head_kv": 3}
DRY_BIG = {"n_embd": 256, "n_layer": 4, "n_ff": 512, "n_head": 4, "n_head_kv": 2}
DRY_SMALL = {"n_embd": 128, "n_layer": 2, "n_ff": 256, "n_head": 2, "n_head_kv": 1}


def out_dir() -> Path:
    folder = Path(os.environ.get("OUT") or CARRY / "out")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Log:
    """Prints and keeps every line in $OUT/gpu_check-<step>.log, so a command killed at its limit still says
    how far it came; each command's saved output goes into $OUT/gpu_check-<step>.json, rewritten after each one
    (at most 8 files come back from the device machine)."""

    def __init__(self, step: str):
        self.file = open(out_dir() / f"gpu_check-{step}.log", "a", encoding="utf-8")
        self.results_path = out_dir() / f"gpu_check-{step}.json"
        self.results: dict = {}
        self.started = time.monotonic()

    def keep(self, name: str, text: str) -> None:
        try:
            self.results[name] = json.loads(text)
        except ValueError:
            self.results[name] = text
        self.results_path.write_text(json.dumps(self.results, indent=1))

    def __call__(self, text: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f} s] {text}"
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def run(log: Log, cmd: list[str], timeout: float, env: dict | None = None,
        save: str | None = None) -> subprocess.CompletedProcess | None:
    """A step's command, its output logged (and saved under $OUT/save); None when it failed or ran out of time,
    so one step's failure leaves the others their time."""
    log("$ " + " ".join(str(c) for c in cmd))
    try:
        done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                              env=env)
    except OSError as exc:  # the program is not there
        log(f"  cannot run {cmd[0]}: {exc.strerror or exc}")
        return None
    except subprocess.TimeoutExpired as exc:
        log(f"  timed out after {timeout:.0f} s")
        for stream in (exc.stdout, exc.stderr):
            if stream:
                log((stream.decode() if isinstance(stream, bytes) else stream)[-3000:])
        return None
    if save:
        log.keep(save, done.stdout)
    text = (done.stdout[-4000:] if not save else "") + done.stderr[-4000:]
    for line in text.splitlines():
        log("  " + line)
    if done.returncode != 0:
        log(f"  exit code {done.returncode}")
        return None
    return done


# --- pack (here) ---------------------------------------------------------------------------------------------

def pack() -> int:
    from app.core.library.bundled import bundled_model_path
    from app.core.making.llama_sources import binding_version, llama_cpp_members, sdist_name
    from app.core.making.runtime_build import sdist_for
    from app.core.making.runtimes import runtimes_dir
    from tests.helpers.tiny_gguf import write_tokenizer_only

    log = Log("pack")
    CARRY.mkdir(exist_ok=True)
    version = binding_version()
    sdist = sdist_for(runtimes_dir(), None, version, sys.stderr)  # the one `hearth runtimes build` would read
    with tarfile.open(sdist) as src, tarfile.open(SOURCES, "w:gz", compresslevel=9) as dst:
        for member in llama_cpp_members(src, version):
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    log(f"{SOURCES.name}: llama.cpp of {sdist_name(version)}, {SOURCES.stat().st_size / 1e6:.1f} MB")

    write_tokenizer_only(VOCAB, bundled_model_path())
    log(f"{VOCAB.name}: the bundled model's tokenizer, {VOCAB.stat().st_size / 1e6:.1f} MB")

    shutil.rmtree(WHEELS, ignore_errors=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in WHEEL_PACKAGES]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           PYTHON_THERE, "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)],
           "-d", str(WHEELS), *pins]
    if run(log, cmd, 600) is None:
        return 1

    shutil.rmtree(PKGS, ignore_errors=True)
    dist = importlib.metadata.distribution("llama_cpp_python")
    package = Path(dist.locate_file("llama_cpp"))
    # With its CPU libraries (24 MB): the cpu runtime there, which Hearth falls back to and probes beside CUDA.
    shutil.copytree(package, PKGS / "llama_cpp", ignore=shutil.ignore_patterns("__pycache__"))
    info = Path(dist._path)  # the .dist-info folder: binding_version() reads it
    shutil.copytree(info, PKGS / info.name)
    size = sum(p.stat().st_size for p in CARRY.rglob("*") if p.is_file())
    log(f"packed {size / 1e6:.1f} MB in {CARRY} (the device takes 64 MiB a call with the working tree)")
    return 0


# --- the environment there -----------------------------------------------------------------------------------

def environment(dry_run: bool) -> dict:
    """The variables every step runs Hearth with: its packages, a home of its own, the runtimes' folder."""
    site = WORK / "site"
    env = dict(os.environ)
    paths = [str(ROOT)] if dry_run else [str(site), str(PKGS), str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env["HEARTH_HOME"] = str(WORK / ("home-dry" if dry_run else "home"))
    env["HEARTH_RUNTIMES_DIR"] = str(WORK / ("runtimes-dry" if dry_run else "runtimes"))
    env["HEARTH_NO_DISCOVERY"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def install_wheels(log: Log) -> bool:
    site = WORK / "site"
    if (site / ".done").exists():
        return True
    wheels = sorted(WHEELS.glob("*.whl"))
    if not wheels:
        log(f"no wheels in {WHEELS}: run `python scripts/gpu_check.py pack` where the package registry is reachable")
        return False
    done = run(log, [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                     "--no-cache-dir", "--upgrade", "--target", site, *wheels], 300)
    if done is None:
        return False
    (site / ".done").write_text("")
    return True


def hearth(*args: str) -> list[str]:
    return [sys.executable, "-m", "app", *args]


# --- build (there) -------------------------------------------------------------------------------------------

def build(jobs: int) -> int:
    log = Log("build")
    WORK.mkdir(parents=True, exist_ok=True)
    if not install_wheels(log):
        return 1
    env = environment(False)
    run(log, ["nvidia-smi", "--query-gpu=name,memory.total,memory.free,driver_version", "--format=csv"], 30)
    started = time.monotonic()
    done = run(log, hearth("runtimes", "build", "cuda", "--arch", ARCH, "--tools", "--keep-build", "--sdist",
                           str(SOURCES), "-j", str(jobs), "--json"), 540, env=env, save="runtimes build")
    if done is None:
        return 1
    log(f"the CUDA runtime built in {time.monotonic() - started:.0f} s")
    # The newest tree that finished its libraries (a call stopped mid-build leaves a partial one beside it).
    kept = sorted((t for t in (WORK / "runtimes").glob(".build-cuda-*") if list(t.glob("build/bin/libllama.so*"))),
                  key=lambda t: t.stat().st_mtime)
    if not kept:
        log("the kept build tree is not there; llama-bench and llama-server are not built")
        return 1
    tree = kept[-1]
    source = next(tree.glob("src/*/vendor/llama.cpp"))
    # llama.cpp's server and bench, in the same tree: the same libraries, only their own files compile. Should the
    # call's 10 minutes end here, `build` again returns the cached runtime at once and goes on in this same tree.
    steps = (["cmake", "-S", source, "-B", tree / "build", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF",
              "-DLLAMA_USE_PREBUILT_UI=OFF"],
             ["cmake", "--build", tree / "build", "--config", "Release", "-j", str(jobs), "--target", "llama-bench",
              "llama-server"])
    for cmd in steps:
        if run(log, cmd, 150, env=env) is None:
            return 1
    # Run where they were built: beside them are the shared libraries they link (llama.cpp's common one too).
    tools = WORK / "tools"
    if tools.is_symlink() or tools.exists():
        tools.unlink()
    tools.symlink_to(tree / "build" / "bin", target_is_directory=True)
    log(f"llama-bench and llama-server in {tools}; {time.monotonic() - started:.0f} s in all")
    run(log, hearth("runtimes", "list", "--json"), 120, env=env, save="runtimes list")
    return 0


# --- bench (there, or here with --dry-run) -------------------------------------------------------------------

def runtime_folder(env: dict, log: Log) -> Path | None:
    done = run(log, hearth("runtimes", "list", "--json"), 120, env=env)
    if done is None:
        return None
    listed = json.loads(done.stdout)
    rows = listed if isinstance(listed, list) else listed.get("runtimes", [])
    for row in rows:
        if row.get("name") == "cuda" and row.get("folder") and row.get("compatible"):
            return Path(row["folder"])
    log("no CUDA runtime is listed: run the build step first")
    return None


def make_models(env: dict, log: Log, dry_run: bool, small: bool) -> dict[str, Path] | None:
    from tests.helpers.tiny_gguf import write_random_llama, write_tokenizer_only

    models = WORK / ("models-dry" if dry_run or small else "models")
    models.mkdir(parents=True, exist_ok=True)
    vocab = VOCAB
    if dry_run and not vocab.exists():
        from app.core.library.bundled import bundled_model_path

        vocab = write_tokenizer_only(models / "vocab.gguf", bundled_model_path())
    made = {}
    for name, shape, quant in (("big", DRY_BIG if dry_run or small else BIG, "Q4_0"),
                               ("small", DRY_SMALL if dry_run or small else SMALL, "Q4_0")):
        f16 = models / f"random-{name}-f16.gguf"
        if not f16.exists():
            started = time.monotonic()
            write_random_llama(f16, vocab, **shape)
            log(f"{f16.name}: {f16.stat().st_size / 1e9:.2f} GB in {time.monotonic() - started:.0f} s")
        quantized = models / f"random-{name}-{quant.lower()}.gguf"
        if not quantized.exists():
            if run(log, hearth("models", "quantize", f16, "--type", quant, "--out", quantized), 300, env=env) is None:
                return None
        made[f"{name}-f16"], made[f"{name}-{quant.lower()}"] = f16, quantized
    return made


class GpuSampler:
    """The GPU's memory in use, sampled by nvidia-smi every 200 ms while a command runs: the peak over the idle
    baseline is what that command's load held on the device (the fit's prediction is checked against it), and
    the series shows memory moving with the load (what the monitor's VRAM graph draws from llama.cpp's figure)."""

    def __init__(self):
        import threading

        self.samples: list[tuple[float, float]] = []
        self.started = time.monotonic()
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                          "-lms", "200"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True)
        except OSError:  # no nvidia-smi (a dry run): no samples
            self.proc = None
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.samples.append((round(time.monotonic() - self.started, 2), float(line.split(",")[0])))
            except ValueError:
                pass

    def stop(self) -> dict:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.thread.join(2)
        used = [mb for _, mb in self.samples]
        return {"baseline_mb": used[0] if used else None, "peak_mb": max(used) if used else None,
                "held_mb": (max(used) - used[0]) if used else None, "series": self.samples[::5]}


def agree_and_fit(env: dict, log: Log, models: dict[str, Path], dry_run: bool) -> None:
    """Issue #46's first part: each model's first words fully offloaded against the CPU runtime's (greedy), and
    what `models fit` predicted for that load against what the GPU held while it answered."""
    # The engine process takes its runtime from Hearth's own runtime choice, not from the variables the
    # in-process benchmarks are given.
    own = {k: v for k, v in env.items() if k not in ("LLAMA_CPP_LIB_PATH", "LD_LIBRARY_PATH")}
    if "LD_LIBRARY_PATH" in os.environ:
        own["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    gpu_runtime = "auto" if dry_run else "cuda"
    run(log, hearth("doctor", "--json"), 120, env=own, save="doctor")
    for key in ("small-q4_0", "big-q4_0", "big-f16"):
        model = models[key]
        run(log, hearth("models", "fit", model, "--ctx", "4096", "--json"), 120, env=own, save=f"fit {model.stem}")
        for runtime, layers in ((gpu_runtime, "-1"), ("cpu", "0")):
            sampler = GpuSampler()
            run(log, hearth("chat", "--model", model, "--runtime", runtime, "--gpu-layers", layers, "--ctx", "4096",
                            "--prompt", "Write one sentence about the sea.", "--temp", "0", "--max-tokens", "12",
                            "--json"), 180, env=own, save=f"chat {model.stem} {runtime}")
            log.keep(f"gpu memory {model.stem} {runtime}", json.dumps(sampler.stop()))
            held = log.results[f"gpu memory {model.stem} {runtime}"]["held_mb"]
            answer = log.results.get(f"chat {model.stem} {runtime}")
            words = answer.get("text", "")[:60] if isinstance(answer, dict) else "(no answer)"
            log(f"  {model.stem} on {runtime}: {words!r}; GPU held {held} MB")


def bench(dry_run: bool, quick: bool, small: bool = False) -> int:
    log = Log("bench-dry" if dry_run else "bench")
    WORK.mkdir(parents=True, exist_ok=True)
    if not dry_run:
        if not install_wheels(log):
            return 1
        sys.path[:0] = [str(WORK / "site"), str(PKGS)]  # this process writes the models with gguf too
    env = environment(dry_run)
    if not dry_run:
        # HEARTH_GPU_CHECK_LIB: other llama.cpp libraries in the runtime's place, to rehearse this step on a machine
        # without the CUDA build (with the device image's packages and the carried ones only).
        rehearsal = os.environ.get("HEARTH_GPU_CHECK_LIB")
        folder = Path(rehearsal) if rehearsal else runtime_folder(env, log)
        if folder is None:
            return 1
        # The in-process benchmarks and quantize load the CUDA runtime's libraries too (engine processes are
        # given them by Hearth's runtime choice).
        env["LLAMA_CPP_LIB_PATH"] = str(folder)
        env["LD_LIBRARY_PATH"] = os.pathsep.join([str(folder), env.get("LD_LIBRARY_PATH", "")])
    models = make_models(env, log, dry_run, small)
    if models is None:
        return 1
    # The extra-buffer probe and bench spec's defaults look for the bundled model, which is too big to carry:
    # a random model of its shape stands in, in Q4_0 (Hearth's quantizer does not make the bundled Q4_1).
    env["HEARTH_BUNDLED_MODEL"] = str(models["small-q4_0"])
    agree_and_fit(env, log, models, dry_run)
    tools = WORK / "tools"
    repeats = "1" if dry_run or quick else "2"
    big, n_layer = models["big-q4_0"], (DRY_BIG if dry_run or small else BIG)["n_layer"]
    # Most telling first, so a command stopped at its limit has taken those: all layers, then the curve; the
    # F16 1.1B and the small model fully offloaded only (the device call has about 6 minutes for all of this).
    # The curve: 0, 25, 50, 75 and 100% of the layers (the first run took 0, 50 and 100% only).
    curve = ("-1", "0", str(n_layer // 2), str(n_layer // 4), str(3 * n_layer // 4))
    plan = ((big, curve), (models["big-f16"], ("-1",)), (models["small-q4_0"], ("-1",)))
    for model, layer_counts in plan:
        for layers in layer_counts:
            run(log, hearth("bench", "--model", model, "--gpu-layers", layers, "--repeats", repeats, "--json"),
                240, env=env, save=f"bench {model.stem} ngl {layers}")
        if (tools / "llama-bench").exists():
            ngl = ",".join("99" if n == "-1" else n for n in layer_counts)
            run(log, [tools / "llama-bench", "-m", model, "-ngl", ngl, "-p", "512", "-n", "128", "-r", repeats,
                      "-o", "json"], 240, env=env, save=f"llama-bench {model.stem}")
    server = None
    against: list[str] = []
    if (tools / "llama-server").exists():
        server = subprocess.Popen([tools / "llama-server", "-m", big, "-ngl", "99", "-np", "4", "-c", "8192",
                                   "--host", "127.0.0.1", "--port", "8391"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=open(out_dir() / "llama-server.log", "w"))
        if _wait_ready("http://127.0.0.1:8391/health", 120):
            against = ["--against", "http://127.0.0.1:8391/v1"]
        else:
            log("llama-server did not come up (its log is llama-server.log); bench serve runs without it")
    try:
        run(log, hearth("bench", "serve", "--model", big, "--gpu-layers", "-1", "--parallel", "4", "--rounds",
                        "1" if dry_run or quick else "2", *against, "--json"), 300, env=env, save="bench serve")
    finally:
        if server is not None:
            server.kill()
            server.wait()
    run(log, hearth("bench", "spec", "--model", models["big-f16"], "--quants", "Q4_0", "--draft",
                    models["small-q4_0"], "--gpu-layers", "-1", "--repeats", repeats, "--no-llama", "--json"),
        300, env=env, save="bench spec")
    # The seed's ladder with every row fully offloaded (its default puts only the combined row on the GPU): the
    # FP16 baseline, INT8, INT4, + speculation, combined; quick (short answers, one run), quality columns left out.
    every_row_on_gpu = [a for row in ("f16", "q8_0", "q4_k_m", "q4_k_m_spec") for a in ("--set", f"{row}.gpu=on")]
    run(log, hearth("bench", "matrix", "--model", models["big-f16"], "--draft-model", models["small-q4_0"],
                    *every_row_on_gpu, "--quick", "--no-quality", "--no-save", "--json"), 240, env=env,
        save="bench matrix")
    log("done")
    return 0


def _wait_ready(url: str, timeout: float) -> bool:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(1)
    return False


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("pack", help="here: what the device machine needs, into .gpu/")
    b = steps.add_parser("build", help="there: the CUDA runtime, llama-bench and llama-server")
    b.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 16)
    c = steps.add_parser("bench", help="there: the benchmarks (--dry-run: here, on the CPU runtime)")
    c.add_argument("--dry-run", action="store_true")
    c.add_argument("--quick", action="store_true", help="one repeat and one round each")
    c.add_argument("--small", action="store_true", help="the dry run's small models (a rehearsal's)")
    args = parser.parse_args(argv)
    if args.step == "pack":
        return pack()
    if args.step == "build":
        return build(args.jobs)
    return bench(args.dry_run, args.quick, args.small)


if __name__ == "__main__":
    sys.exit(main())
