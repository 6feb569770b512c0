"""`hearth models quantize --imatrix FILE` (#33): llama.cpp's quantizer takes the matrix through
llama_model_quantize_params.imatrix, the quant remembers it, and wrong matrices or missing ones are one sentence."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from app.core.gguf.info import read_gguf_info
from app.core.gguf.imatrix import Entry, Imatrix, ImatrixError, write_imatrix
from app.core.making.quantize import quantize

pytestmark = pytest.mark.slow


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "models", *args], capture_output=True, text=True, timeout=300)


def _tensor_bytes(path, name: str) -> tuple[str, bytes]:
    info = read_gguf_info(path)
    t = next(t for t in info.tensors if t.name == name)
    with open(path, "rb") as fh:
        fh.seek(info.data_start + t.offset)
        return t.type, fh.read(t.n_bytes)


def test_a_quant_made_with_a_matrix_uses_it_and_remembers_it(bundled_imatrix, calibrated_variants):
    text, made, _ = bundled_imatrix
    _, plain, calibrated = calibrated_variants  # Q4_K_M of one F16 file, without and with the matrix
    # The K-quant weights differ, so llama.cpp weighed its rounding by the matrix (a width-576 tensor that fell
    # back to Q5_0 would tell less).
    with_matrix, without = (_tensor_bytes(p, "blk.0.ffn_down.weight") for p in (calibrated, plain))
    assert with_matrix[0] == without[0] and with_matrix[0].endswith("_K") and with_matrix[1] != without[1]
    inspect = _cli("inspect", str(calibrated))
    assert inspect.returncode == 0, inspect.stderr
    line = next(ln for ln in inspect.stdout.splitlines() if ln.startswith("Calibration:"))
    assert f"importance matrix {made.path} (210 weight matrices, {made.chunks} chunks)" in line
    assert line.endswith(f"from {text.resolve()}")  # the text it came from, as llama-quantize records it
    from app.commands.models import _calibration

    assert _calibration(read_gguf_info(plain).metadata) == "none: the file records no importance matrix"


def test_types_that_need_a_matrix_are_refused_without_one_in_one_sentence(bundled_model):
    cli = _cli("quantize", str(bundled_model), "--type", "IQ2_XXS", "--allow-requantize")
    assert cli.returncode == 1 and "Traceback" not in cli.stderr
    assert cli.stderr.startswith("hearth: IQ2_XXS needs an importance matrix") and cli.stderr.count("\n") == 1
    assert "hearth models imatrix" in cli.stderr


def test_a_matrix_of_another_model_or_no_matrix_at_all_is_one_sentence(bundled_model, tmp_path):
    wide = tmp_path / "wide.imatrix.gguf"  # another model's width: 640 inputs where the bundled model has 576
    write_imatrix(wide, Imatrix(entries={"blk.0.attn_q.weight": Entry(np.ones((1, 640), np.float32),
                                                                      np.ones(1, np.float32))},
                                datasets=["other.txt"], chunk_count=1, chunk_size=64, model="other-model.gguf"))
    deeper = tmp_path / "deeper.imatrix.gguf"  # another model's depth: a layer the bundled model does not have
    write_imatrix(deeper, Imatrix(entries={"blk.40.ffn_up.weight": Entry(np.ones((1, 576), np.float32),
                                                                         np.ones(1, np.float32))},
                                  datasets=["other.txt"], chunk_count=1, chunk_size=64))
    with pytest.raises(ImatrixError, match=r"computed on another model \(it was computed on other-model.gguf\): "
                                           r"its blk.0.attn_q.weight has 640 columns, .*'s has 576"):
        quantize(bundled_model, "Q4_K_M", out=tmp_path / "x.gguf", allow_requantize=True, imatrix=wide)
    with pytest.raises(ImatrixError, match=r"1 of its 1 entries name no weight of .* \(such as blk.40.ffn_up"):
        quantize(bundled_model, "Q4_K_M", out=tmp_path / "x.gguf", allow_requantize=True, imatrix=deeper)
    with pytest.raises(ImatrixError, match="is not an importance matrix: it is a GGUF model file"):
        quantize(bundled_model, "Q4_K_M", out=tmp_path / "x.gguf", allow_requantize=True, imatrix=bundled_model)
    assert not (tmp_path / "x.gguf").exists()
