"""The installer as a user gets it: build the PyInstaller bundle, unpack its archive elsewhere, run it bare.

The bundle runs from a folder the build never saw, with a clean environment (no virtualenv or pyenv on
PATH, no PYTHONPATH, HOME an empty folder), so it can only work if it carries its own Python, Qt,
llama.cpp and model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from app import __version__

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1500
# Qt modules Hearth never uses; any of them in the bundle means the excludes stopped working.
# (Qt6Network is used: the single-instance hand-over, app/ui/single_instance.py.)
UNUSED_QT = ("WebEngine", "Qt6Qml", "Qt6Quick", "Qt63D", "Qt6Multimedia", "Qt6Pdf", "Qt6Designer", "Qt6Charts",
             "Qt6Sql")
# Heavy Python packages that optional imports would drag in.
UNUSED_PACKAGES = ("torch", "transformers", "botocore", "openai", "pydantic", "cryptography", "hf_xet", "PIL")
MAX_BUNDLE_MB = 400


def bundle_test(func):
    """Slow (it needs the build, which the first such test pays for) and Linux-only: the CI builds that one."""
    for mark in (pytest.mark.timeout(BUILD_TIMEOUT_S + 600), pytest.mark.slow,
                 pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CI builds the Linux bundle")):
        func = mark(func)
    return func


def clean_env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def run_bundle(exe: Path, *args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=clean_env(home),
                          cwd=home, stdin=subprocess.DEVNULL)


@pytest.fixture
def home(tmp_path) -> Path:
    """An empty home folder for the bundle's clean environment."""
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Build dist/Hearth and its archive into a temporary folder; return that dist folder."""
    if importlib.util.find_spec("PyInstaller") is None:
        pytest.fail("PyInstaller is not installed: pip install -e '.[package]'")
    out = tmp_path_factory.mktemp("build")
    proc = subprocess.run([sys.executable, str(ROOT / "packaging" / "build.py"), "--dist", str(out / "dist"),
                           "--work", str(out / "work")], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(proc.stdout.strip())  # the bundle's size and build time, for the log
    return out / "dist"


@pytest.fixture(scope="module")
def unpacked(built, tmp_path_factory) -> Path:
    """The archive unpacked into a fresh folder, as a user would; returns the Hearth executable."""
    archives = list(built.glob(f"Hearth-{__version__}-linux-*.tar.gz"))
    assert len(archives) == 1, list(built.iterdir())
    target = tmp_path_factory.mktemp("installed")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(target, filter="tar")
    exe = target / "Hearth" / "Hearth"
    assert os.access(exe, os.X_OK)
    return exe


@bundle_test
def test_unpacked_bundle_passes_its_selftest_in_a_clean_environment(unpacked, home):
    proc = run_bundle(unpacked, "--selftest", home=home)
    report = proc.stdout
    print(report)
    assert proc.returncode == 0, report + proc.stderr[-3000:]
    assert report.rstrip().endswith("selftest passed")
    assert f"Hearth {__version__} selftest (frozen bundle" in report
    assert f"executable {unpacked}" in report
    # The model, the resources and the engine come from the unpacked folder, not from this checkout.
    bundle_dir = str(unpacked.parent)
    model_line = re.search(r"^ {2}ok {4}model +(.+)$", report, re.M)
    assert model_line and bundle_dir in model_line.group(1), report
    assert re.search(rf"^ {{2}}ok {{4}}resources +{re.escape(bundle_dir)}", report, re.M), report
    engine_line = re.search(r"^ {2}ok {4}engine +.*; (\d+) tokens at ([\d.]+) tok/s: (['\"]).+\3$", report, re.M)
    assert engine_line and int(engine_line.group(1)) > 0, report
    gui_line = re.search(r"^ {2}ok {4}gui +main window \d+x\d+ painted offscreen in ([\d.]+) s", report, re.M)
    assert gui_line and float(gui_line.group(1)) < 60, report


@bundle_test
def test_unpacked_bundle_runs_the_cli_and_names_a_bad_model_in_one_sentence(unpacked, home):
    version = run_bundle(unpacked, "--version", home=home, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"hearth {__version__}", version.stderr
    bad = home / "broken.gguf"
    bad.write_bytes(b"not a model")
    proc = run_bundle(unpacked, "chat", "--model", str(bad), "--prompt", "hi", home=home, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.startswith("hearth: ") and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@bundle_test
def test_unpacked_bundle_quantizes_in_its_worker_process_and_chats_with_the_result(unpacked, home):
    """`--quantize-worker` is another hidden flag of the frozen executable; its output must load and answer."""
    model = next((unpacked.parent / "_internal" / "models").glob("*.gguf"))
    out = home / "smol-q8_0.gguf"
    proc = run_bundle(unpacked, "models", "quantize", "--type", "Q8_0", "--out", str(out), "--json", str(model),
                      home=home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["type"] == "Q8_0" and out.stat().st_size > model.stat().st_size
    chat = run_bundle(unpacked, "chat", "--model", str(out), "--prompt", "Say hi.", "--temp", "0", "--max-tokens",
                      "6", "--json", home=home)
    assert chat.returncode == 0, chat.stderr
    assert json.loads(chat.stdout)["completion_tokens"] > 0


@bundle_test
def test_bundle_is_lean(built):
    bundle = built / "Hearth"
    # PyInstaller links some libraries into _internal/ from where they lie; count each file once.
    files = [p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink()]
    names = [str(p.relative_to(bundle)) for p in files]
    assert not [n for n in names if any(q in n for q in UNUSED_QT)], "unused Qt modules were bundled"
    top = {Path(n).parts[1] for n in names if len(Path(n).parts) > 1}
    assert not top & set(UNUSED_PACKAGES), top & set(UNUSED_PACKAGES)
    # llama.cpp's libraries once each, not once per versioned symlink name.
    assert not [n for n in names if re.search(r"libllama\.so\.\d", n)], [n for n in names if "libllama" in n]
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    model_mb = sum(p.stat().st_size for p in files if p.suffix == ".gguf") / 1e6
    print(f"bundle {size_mb:.0f} MB, of which the model {model_mb:.0f} MB")
    assert model_mb > 50, "the bundled model is missing"
    assert size_mb < MAX_BUNDLE_MB


def test_selftest_names_the_failing_check_and_exits_non_zero(tmp_path):
    """From source: a missing model fails the model and engine checks with a sentence, and the GUI still passes."""
    env = dict(os.environ, HEARTH_BUNDLED_MODEL=str(tmp_path / "missing.gguf"))
    proc = subprocess.run([sys.executable, "-m", "app", "--selftest"], capture_output=True, text=True, timeout=300,
                          env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"^ {2}FAIL {2}model +.*missing\.gguf", proc.stdout, re.M), proc.stdout
    assert re.search(r"^ {2}FAIL {2}engine ", proc.stdout, re.M), proc.stdout
    assert re.search(r"^ {2}ok {4}gui ", proc.stdout, re.M), proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("selftest failed: model: ")
    assert "Traceback" not in proc.stdout + proc.stderr
