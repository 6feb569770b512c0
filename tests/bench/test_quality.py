"""`hearth bench quality` (#33): each quant's cost against its base on the user's text, with llama-perplexity's
definitions. The base is the bundled model's F16 copy; the text is this project's README."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench.quality import QualityError, QualityOptions, chunks_of, measure

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("quality") / "readme-part.md"
    path.write_text((ROOT / "README.md").read_text(encoding="utf-8")[:3000], encoding="utf-8")
    return path


def test_each_quant_is_measured_against_the_base_and_lower_bits_cost_more(model_variant, text):
    base = model_variant("F16")
    result = measure(QualityOptions(text=str(text), model=str(base), quants=["Q8_0", "Q4_0"], ctx=128))
    rows = {row["type"]: row for row in result["rows"]}
    assert all(row["ok"] for row in rows.values()), rows
    assert result["base"]["note"] is None  # an F16 base is no quantized one
    q8, q4 = rows["Q8_0"], rows["Q4_0"]
    assert q8["positions"] == q4["positions"] == result["base"]["positions"] == result["base"]["chunks"] * 63
    assert 0 < q8["kld_mean"] < 0.05 and q8["same_top"] > 0.85  # INT8 costs little (0.005 and 95% measured)
    assert q4["kld_mean"] > 4 * q8["kld_mean"] and q4["same_top"] < q8["same_top"]  # INT4 costs more
    assert q4["kld_p99"] >= q4["kld_mean"] and q4["ppl_ratio"] > 1.0
    assert q8["mix"].startswith("Q8_0") and q4["size_bytes"] < q8["size_bytes"] < result["base"]["size_bytes"]


def test_bad_input_gets_one_sentence(tmp_path, bundled_model):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(QualityError, match="is empty: there is nothing to score"):
        measure(QualityOptions(text=str(empty), model=str(bundled_model), quants=["Q8_0"]))
    with pytest.raises(QualityError, match="does not exist"):
        measure(QualityOptions(text=str(tmp_path / "nothing.txt"), model=str(bundled_model)))
    with pytest.raises(QualityError, match=r"The text has 3 tokens; scoring needs at least one chunk of --ctx 256"):
        chunks_of([1, 2, 3], 256, None)
    short = tmp_path / "short.txt"
    short.write_text("Too short to score.")
    cli = subprocess.run([sys.executable, "-m", "app", "bench", "quality", "--text", str(short), "--model",
                          str(bundled_model), "--quants", "Q8_0", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert cli.returncode == 1 and "scoring needs at least one chunk" in cli.stderr and "Traceback" not in cli.stderr


def test_a_quantized_base_is_said_and_compared_against_all_the_same(bundled_model, text):
    cli = subprocess.run([sys.executable, "-m", "app", "bench", "quality", "--text", str(text), "--model",
                          str(bundled_model), "--quants", "Q4_1", "--ctx", "128", "--json"], capture_output=True,
                         text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr
    result = json.loads(cli.stdout)
    assert "is already quantized (Q4_1): the figures say what each quant loses against it" in result["base"]["note"]
    row = result["rows"][0]  # its own type: the base itself, nothing quantized again
    assert row["ok"] and row["path"] == str(bundled_model)
    # The base against itself: the same model, threads and batches give the same logits, exactly.
    assert row["kld_mean"] == 0.0 and row["same_top"] == 1.0 and row["ppl_ratio"] == 1.0


def test_a_long_text_is_scored_within_the_disk_bound(monkeypatch, bundled_model, text):
    """The base's log-probs are positions x vocabulary floats on disk: a long text is cut to its first chunks,
    the quants score the same ones, and the table says so."""
    from app.bench import quality

    monkeypatch.setattr(quality, "STORE_BYTES", 3 * 2**20)  # one chunk of 32 (15 positions x 49,152 floats)
    result = measure(QualityOptions(text=str(text), model=str(bundled_model), quants=["Q4_1"], ctx=32))
    base, row = result["base"], result["rows"][0]
    assert base["chunks"] == row["chunks"] == 1 < base["text_chunks"] and row["positions"] == 15
    assert "Scored the first 1 of the text's" in quality.format_table(result)
