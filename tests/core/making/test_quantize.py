"""In-app quantization with llama.cpp's quantizer in a child process; the result loads and generates."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from app.core import library, paths
from app.core.errors import HearthError
from app.core.gguf.info import read_gguf_info
from app.core.making.quantize import QuantizeCancelled, RequantizeRefused, quantize, type_label
from app.protocol.messages import LoadOptions, SamplingOptions

pytestmark = pytest.mark.slow


def test_quantized_model_joins_the_library_and_generates(engine, bundled_model):
    seen = []
    result = quantize("bundled", "Q4_0", progress=lambda d, t: seen.append((d, t)), allow_requantize=True)
    assert result.type == "Q4_0" and result.seed_name == "INT4"
    assert result.path.startswith(str(paths.models_dir()))
    assert read_gguf_info(result.path).file_type == "Q4_0"
    assert seen[-1][0] == seen[-1][1] == result.size_bytes
    entry = library.resolve("SmolLM2-135M-Instruct-Q4_0")
    assert entry.source == "quantized" and entry.owned and entry.quantization == "Q4_0"

    loaded = engine.load(LoadOptions(model_path=entry.path, n_ctx=512))
    assert loaded["n_layer"] == 30
    text = "".join(e.get("text", "") for e in engine.complete("The capital of France is",
                                                              SamplingOptions(max_tokens=8, temperature=0))
                   if e["ev"] == "token")
    assert text.strip()


def test_out_path_outside_the_models_folder_is_recorded(tmp_path, bundled_model):
    out = tmp_path / "elsewhere" / "small-f16.gguf"
    result = quantize(bundled_model, "F16", out=out, allow_requantize=True)
    assert result.path == str(out.resolve()) and out.stat().st_size > 250e6
    entry = library.resolve(out)
    assert entry.source == "quantized" and entry.owned and entry.quantization == "F16"
    library.remove_model(out)
    assert not out.exists()


def test_cancel_kills_the_child_and_keeps_nothing(bundled_model):
    cancel = threading.Event()
    children = []
    # Only quantize's own child: an earlier test's child still ending (a server, a probe) is not this one's.
    before = {c.pid for c in psutil.Process().children()}

    def progress(done, total):
        children.extend(c for c in psutil.Process().children() if c.pid not in before)
        cancel.set()

    started = time.monotonic()
    with pytest.raises(QuantizeCancelled, match="cancelled"):
        quantize(bundled_model, "Q8_0", progress=progress, cancel=cancel, allow_requantize=True)
    assert time.monotonic() - started < 10
    assert children and not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
    assert not list(paths.models_dir().glob("*Q8_0*"))


def test_bad_requests_give_one_sentence(tmp_path, bundled_model):
    with pytest.raises(HearthError, match="Unknown quantization type 'Q3_X'"):
        quantize(bundled_model, "Q3_X")
    with pytest.raises(HearthError, match="overwrite"):
        quantize(bundled_model, "Q8_0", out=bundled_model, allow_requantize=True)
    assert type_label("Q4_K_M") == "Q4_K_M (INT4)" and type_label("Q8_0") == "Q8_0 (INT8)"


def test_an_already_quantized_source_is_refused_with_the_reason_unless_allowed(tmp_path, bundled_model):
    """#29: Q4 to Q8_0 wrote a bigger file with nothing to gain, and no word."""
    import subprocess
    import sys

    with pytest.raises(RequantizeRefused, match=r"already quantized \(Q4_1\).*Q8_0 file \(about .* against .*\) "
                                                r"has more bits but no more.*--allow-requantize"):
        quantize(bundled_model, "Q8_0", out=tmp_path / "q8.gguf")
    assert not list(tmp_path.iterdir())  # nothing written, nothing half-written
    cli = subprocess.run([sys.executable, "-m", "app", "models", "quantize", str(bundled_model), "--type", "Q4_0",
                          "--out", str(tmp_path / "q4.gguf")], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1 and "already quantized (Q4_1)" in cli.stderr and "Traceback" not in cli.stderr
    assert "more bits" not in cli.stderr  # Q4_0 is no bigger: only the loss is said
    assert not list(tmp_path.iterdir())
