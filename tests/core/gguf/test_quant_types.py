"""One table of quantization types, and GGUF file-name rules."""

from __future__ import annotations

import pytest

from app.core.gguf import quant_types as qt
from app.core.gguf.names import split_part, strip_quant


def test_each_client_offers_the_types_it_offered_before():
    assert qt.QUANTIZE_TYPES == ("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")
    assert qt.CONVERT_QUANTS == ("Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q4_K_M", "Q4_1", "Q4_0")
    assert qt.CONVERT_OUTTYPES == ("f16", "bf16", "q8_0", "f32")
    assert qt.label("Q4_K_M") == "Q4_K_M (INT4)" and qt.label("Q8_0") == "Q8_0 (INT8)" and qt.label("X") == "X"


def test_every_target_has_a_size_and_a_llama_cpp_file_type():
    llama_cpp = pytest.importorskip("llama_cpp")
    gguf = pytest.importorskip("gguf")
    for name in {*qt.QUANTIZE_TYPES, *qt.CONVERT_QUANTS}:
        assert qt.bits_per_weight(name) and hasattr(llama_cpp, qt.llama_ftype(name)), name
    for outtype in qt.CONVERT_OUTTYPES:
        assert hasattr(gguf.LlamaFileType, qt.BY_NAME[outtype.upper()].ftype), outtype


def test_split_names():
    part = split_part("dir/model-Q4_K_M-00002-of-00003.gguf")
    assert (part.base, part.index, part.count) == ("dir/model-Q4_K_M", 2, 3)
    assert split_part("model.gguf") is None
    assert strip_quant("SmolLM2-135M-Instruct-Q4_1") == "SmolLM2-135M-Instruct"
