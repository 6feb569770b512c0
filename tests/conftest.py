"""Shared fixtures: an isolated Hearth home, the bundled model, engine clients."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def hearth_home(tmp_path_factory, monkeypatch) -> Path:
    """Every test gets its own HEARTH_HOME; no test touches the real home folder."""
    home = tmp_path_factory.mktemp("hearth_home")
    monkeypatch.setenv("HEARTH_HOME", str(home))
    # Model discovery (app/core/library/__init__.py) looks for other apps' models here instead of the real home.
    monkeypatch.setenv("HEARTH_DISCOVERY_HOME", str(home / "discovery-home"))
    # The extra-buffer probe costs a child process; share its (per-machine) answer across tests.
    shared = _shared_machine_facts(tmp_path_factory)
    if not shared.exists():
        _probe_once(shared, home / "probe-home", monkeypatch)
    if shared.exists():
        (home / "data").mkdir(parents=True, exist_ok=True)
        (home / "data" / "machine.json").write_bytes(shared.read_bytes())
    yield home
    produced = home / "data" / "machine.json"
    if produced.exists() and not shared.exists():
        shared.write_bytes(produced.read_bytes())


def _shared_machine_facts(factory) -> Path:
    return factory.getbasetemp() / "machine.json"


def _probe_once(shared: Path, probe_home: Path, monkeypatch) -> None:
    """The probe, run once for the session as a machine's first start runs it, so that no test's engine starts
    one beside its own work (two cores: a probe child loading a model would slow the test's answer)."""
    from app.core.library.bundled import bundled_model_path
    from app.engine.probes.probe import run_probe

    with monkeypatch.context() as m:
        m.setenv("HEARTH_HOME", str(probe_home))
        run_probe(str(bundled_model_path()))
    made = probe_home / "data" / "machine.json"
    if made.exists():
        shared.write_bytes(made.read_bytes())


@pytest.fixture(scope="session")
def bundled_model() -> Path:
    from app.core.library.bundled import bundled_model_path

    return bundled_model_path()


@pytest.fixture
def engine():
    from app.backends.client import EngineClient

    client = EngineClient()
    yield client
    client.close()


@pytest.fixture(scope="session")
def model_variant(tmp_path_factory, bundled_model):
    """model_variant("F16" | "Q8_0" | "Q4_0" | "Q4_K_M" | "Q4_1") -> path of the bundled model in that type.

    Made once per test session with llama.cpp's own quantizer (about a second each).
    """
    import llama_cpp

    folder = tmp_path_factory.mktemp("variants")
    made: dict[str, Path] = {"Q4_1": bundled_model}
    ftypes = {"F16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16, "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
              "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M}

    def get(kind: str) -> Path:
        if kind not in made:
            out = folder / f"smollm2-135m-{kind}.gguf"
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = ftypes[kind]
            params.allow_requantize = True
            rc = llama_cpp.llama_model_quantize(str(bundled_model).encode(), str(out).encode(), params)
            assert rc == 0, f"quantizing to {kind} failed"
            made[kind] = out
        return made[kind]

    return get


@pytest.fixture(scope="session")
def bundled_imatrix(tmp_path_factory, bundled_model):
    """(text file, ImatrixResult, progress steps seen): an importance matrix of the bundled model, computed once per
    session by Hearth's real child process from a slice of the README (chars 3000-3900: not the slice that
    tests/bench/test_quality.py measures on), chunks of 64 tokens, one thread (about 3 s)."""
    from app.core.making.calibration_text import dataset_name, file_documents
    from app.backends.imatrix import make_imatrix

    folder = tmp_path_factory.mktemp("imatrix")
    text = folder / "readme-calibration.md"
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    text.write_text(readme[3000:3900], encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:  # session-scoped: before any test's own HEARTH_HOME
        mp.setenv("HEARTH_HOME", str(folder / "home"))
        docs = file_documents([str(text)])
        seen: list = []
        result = make_imatrix(bundled_model, docs, dataset_name(docs, False), out=folder / "bundled.imatrix.gguf",
                              ctx=64, threads=1, progress=lambda done, total: seen.append((done, total)))
    return text, result, seen


@pytest.fixture(scope="session")
def calibrated_variants(tmp_path_factory, model_variant, bundled_imatrix):
    """(home, plain, calibrated): Q4_K_M of the bundled model's F16 copy without and with bundled_imatrix, made once
    per session by the benchmark's prepare_variant (Hearth's quantize, the matrix through llama.cpp's
    llama_model_quantize_params.imatrix) into the models folder of `home`. A test that sets HEARTH_HOME to `home`
    finds both there, as `hearth bench quality` keeps its quants."""
    from app.bench.variants import prepare_variant

    home = tmp_path_factory.mktemp("calibrated-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HEARTH_HOME", str(home))
        plain = prepare_variant(model_variant("F16"), "Q4_K_M")["path"]
        calibrated = prepare_variant(model_variant("F16"), "Q4_K_M", imatrix=bundled_imatrix[1].path)["path"]
    return home, Path(plain), Path(calibrated)


@pytest.fixture(scope="session")
def gemma3_model(tmp_path_factory) -> Path:
    """A random-weight model of another family than the bundled one: Gemma 3's shape (sliding-window attention, a
    262k SentencePiece vocabulary with Gemma's turn markers, no chat template), 77 MB of F16, written in 6 s."""
    from tests.helpers.tiny_gguf import write_random_gemma3

    return write_random_gemma3(tmp_path_factory.mktemp("gemma3") / "random-gemma3-F16.gguf")


@pytest.fixture(scope="session")
def tiny_media():
    """{"gemma3" | "qwen2vl" | "qwen2audio": TinyModel(model, mmproj)}: random-weight models that see and hear,
    made by tests/helpers/tiny_media.py (about 10 s, once; cached under HEARTH_TINY_MEDIA_DIR or
    ~/.cache/hearth-tiny-media). Skips where transformers or torch are missing."""
    from tests.helpers.tiny_media import tiny_media_models

    return tiny_media_models()


@pytest.fixture(scope="session")
def extra_bufts_work(bundled_model) -> bool:
    """Whether llama.cpp's extra buffer types run quantized models on this CPU (Hearth's own probe). On AMX
    machines they segfault (llama.cpp issue 20824): Hearth turns them off itself, other programs do not."""
    from app.engine.probes.probe import extra_bufts_decision

    return bool(extra_bufts_decision(str(bundled_model)).get("ok"))


@pytest.fixture(scope="session")
def third_party_model(bundled_model, model_variant, extra_bufts_work) -> Path:
    """The model for servers Hearth did not write (llama-cpp-python's server, llama-server): the bundled one,
    or on a CPU where their default extra buffer types crash every quantized model, its F16 copy, which
    runs there. llama-cpp-python's server has no switch for them; a user on such a machine would hit the same."""
    return bundled_model if extra_bufts_work else model_variant("F16")


HEAVY_ENV = "HEARTH_TEST_HEAVY"


def pytest_collection_modifyitems(config, items) -> None:
    """The heavy tier (whole-program builds, generation on lavapipe, the benchmark commands' own runs, and the few
    tests slow by design, whose waits are what they test) runs only where HEARTH_TEST_HEAVY=1 (`bash tests/run.sh
    --heavy`, which CI runs after the suite): together they took about 18 of the suite's minutes on two cores, and
    the suite is kept under 20 (22:44 here on 2026-12-06 before the slow-by-design ones joined the tier)."""
    if os.environ.get(HEAVY_ENV) == "1":
        return
    skip = pytest.mark.skip(reason="the heavy tier: `bash tests/run.sh --heavy` (or HEARTH_TEST_HEAVY=1) runs it")
    for item in items:
        if item.get_closest_marker("heavy") is not None:
            item.add_marker(skip)


def pytest_sessionstart(session) -> None:
    """Say which machine a report came from, even with -q: llama.cpp's kernels round differently per
    instruction set, so a failure on one CPU may not show on another."""
    from app.core.machine import cpu_summary

    try:
        import llama_cpp

        build = f"llama-cpp-python {llama_cpp.__version__}"
    except ImportError:
        build = "llama-cpp-python not installed"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"hearth tests on: {cpu_summary()}; {build}")
