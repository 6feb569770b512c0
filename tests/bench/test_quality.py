"""`hearth bench quality` (#33): each quant's cost against its base on the user's text, with llama-perplexity's
definitions. The base is the bundled model's F16 copy; the text is this project's README."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench.quality import QualityError, QualityOptions, chunks_of, format_table, measure

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("quality") / "readme-part.md"
    path.write_text((ROOT / "README.md").read_text(encoding="utf-8")[:3000], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def measured(model_variant, text) -> dict:
    """Q8_0 and Q4_0 against the F16 copy on the text, context 128: measured once for this module's tests."""
    return measure(QualityOptions(text=str(text), model=str(model_variant("F16")), quants=["Q8_0", "Q4_0"], ctx=128))


@pytest.mark.heavy
def test_each_quant_is_measured_against_the_base_and_lower_bits_cost_more(measured):
    result = measured
    rows = {row["type"]: row for row in result["rows"]}
    assert all(row["ok"] for row in rows.values()), rows
    assert result["base"]["note"] is None  # an F16 base is no quantized one
    q8, q4 = rows["Q8_0"], rows["Q4_0"]
    assert q8["positions"] == q4["positions"] == result["base"]["positions"] == result["base"]["chunks"] * 63
    assert 0 < q8["kld_mean"] < 0.05 and q8["same_top"] > 0.85  # INT8 costs little (0.005 and 95% measured)
    assert q4["kld_mean"] > 4 * q8["kld_mean"] and q4["same_top"] < q8["same_top"]  # INT4 costs more
    assert q4["kld_p99"] >= q4["kld_mean"] and q4["ppl_ratio"] > 1.0
    assert q8["mix"].startswith("Q8_0") and q4["size_bytes"] < q8["size_bytes"] < result["base"]["size_bytes"]
    # Each file's generation speed beside its quality (one-token decodes, timed).
    assert q8["tg_tok_s"] > 0 and q4["tg_tok_s"] > 0 and result["base"]["tg_tok_s"] > 0


@pytest.mark.heavy
def test_the_figures_agree_with_llama_perplexity_on_the_same_files_text_and_context(measured, text, tmp_path):
    """#33: the definitions are llama-perplexity's, so its --kl-divergence on the same files, text and context gives
    the same mean KLD (within 2% relative) and same-top share (within 0.5 points). The tool is built from the pinned
    sdist's llama.cpp beside the Vulkan runtime (python -m app.core.making.runtime_build vulkan --portable --tools; tests/
    run.sh does it with HEARTH_TEST_LLAMA_TOOLS=1) or named by HEARTH_LLAMA_PERPLEXITY."""
    from tests.helpers.llama_tools import llama_perplexity, run_kl_divergence

    tool = llama_perplexity()
    if tool is None:
        pytest.skip("llama-perplexity is not built: python -m app.core.making.runtime_build vulkan --portable --tools "
                    "(or HEARTH_TEST_LLAMA_TOOLS=1 tests/run.sh) builds it, or HEARTH_LLAMA_PERPLEXITY names one")
    base = measured["base"]
    lines = []
    for row in measured["rows"]:
        theirs = run_kl_divergence(tool, base["path"], row["path"], text, measured["ctx"], tmp_path)
        lines.append(f"{row['type']}: mean KLD {row['kld_mean']:.5f} (llama-perplexity {theirs['kld_mean']:.5f}), "
                     f"same top {100 * row['same_top']:.2f}% ({theirs['same_top']:.2f}%), PPL {row['ppl']:.3f} "
                     f"({theirs['ppl']:.3f}), {theirs['chunks']} chunks")
        assert theirs["chunks"] == row["chunks"], lines[-1]
        assert row["kld_mean"] == pytest.approx(theirs["kld_mean"], rel=0.02), lines[-1]
        assert abs(100 * row["same_top"] - theirs["same_top"]) <= 0.5, lines[-1]
    print("\n" + "\n".join(lines))


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


@pytest.mark.heavy
def test_a_quantized_base_is_said_and_compared_against_all_the_same(bundled_model, text, tmp_path):
    chart = tmp_path / "size-vs-kld.png"
    cli = subprocess.run([sys.executable, "-m", "app", "bench", "quality", "--text", str(text), "--model",
                          str(bundled_model), "--quants", "Q4_1,Q8_0", "--ctx", "128", "--threads", "1", "--json",
                          "--plot", str(chart)],
                         capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr
    result = json.loads(cli.stdout)
    assert "is already quantized (Q4_1): the figures say what each quant loses against it" in result["base"]["note"]
    row = result["rows"][0]  # its own type: the base itself, nothing quantized again
    assert row["ok"] and row["path"] == str(bundled_model)
    # The base against itself: the same model, threads and batches give the same logits, exactly.
    assert row["kld_mean"] == 0.0 and row["same_top"] == 1.0 and row["ppl_ratio"] == 1.0
    assert result["rows"][1]["kld_mean"] > 0  # Q8_0 made from the Q4_1 base
    # --plot: a size-vs-KLD PNG with the Q8_0 point in the without-a-matrix colour (the Q4_1 row, at KLD 0, has
    # no place on the log axis and is named under it).
    from PySide6.QtGui import QColor, QImage

    from app.bench.quality_chart import PLAIN
    from app.ui.bench.quality_plot import COLORS

    image = QImage(str(chart))
    assert result["plot"] == str(chart) and (image.width(), image.height()) == (900, 600)
    blue = COLORS[PLAIN].rgb()
    assert any(image.pixel(x, y) == blue for x in range(90, 860, 2) for y in range(70, 530, 2))


def test_a_long_text_is_scored_within_the_disk_bound(monkeypatch, bundled_model, text):
    """The base's log-probs are positions x vocabulary floats on disk: a long text is cut to its first chunks,
    the quants score the same ones, and the table says so."""
    from app.bench import quality

    monkeypatch.setattr(quality, "STORE_BYTES", 3 * 2**20)  # one chunk of 32 (15 positions x 49,152 floats)
    result = measure(QualityOptions(text=str(text), model=str(bundled_model), quants=["Q4_1"], ctx=32))
    base, row = result["base"], result["rows"][0]
    assert base["chunks"] == row["chunks"] == 1 < base["text_chunks"] and row["positions"] == 15
    table = quality.format_table(result)
    assert "Scored the first 1 of the text's" in table
    # The row's generation speed is measured (32 one-token decodes) and printed in its own column.
    assert row["tg_tok_s"] > 0 and "tg tok/s" in table and f"{row['tg_tok_s']:.1f}" in table


# IQ4_XS's quantizer searches each block's scales: about 30 s a file here (two: one with the matrix, one without),
# which is more than this suite's budget for the whole #33 set, so that half runs when asked for.
IQ4_XS = pytest.param("IQ4_XS", marks=pytest.mark.skipif(
    not os.environ.get("HEARTH_TEST_IQ_QUANTS"), reason="IQ4_XS takes about a minute to quantize twice here; "
                                                        "HEARTH_TEST_IQ_QUANTS=1 runs it"))


@pytest.mark.heavy
@pytest.mark.parametrize("qtype", ["Q4_K_M", IQ4_XS])
def test_a_matrix_from_another_text_is_measured_and_not_worse_beyond_the_noise(model_variant, text, bundled_imatrix,
                                                                               calibrated_variants, monkeypatch, qtype):
    """#33: the same type made with and without a matrix computed on one text (README chars 3000-3900), both
    measured on another text of the same kind (README chars 0-1700, three chunks: the time budget). The small model
    may show no margin, so only 'not worse beyond the noise' is asserted: two standard errors of each difference.
    One thread: on a busy 2-core machine two threads take three times as long (DESIGN.md)."""
    _, matrix, _ = bundled_imatrix
    home, *made = calibrated_variants
    monkeypatch.setenv("HEARTH_HOME", str(home))  # where the session made the Q4_K_M pair (tests/conftest.py)
    short = text.with_name("readme-first-1700.md")
    short.write_text(text.read_text(encoding="utf-8")[:1700], encoding="utf-8")
    result = measure(QualityOptions(text=str(short), model=str(model_variant("F16")), quants=[qtype], ctx=128,
                                    threads=1, imatrix=matrix.path))
    plain, calibrated = result["rows"]
    assert (plain["type"], plain["imatrix"], calibrated["type"], calibrated["imatrix"]) == (qtype, False, qtype, True)
    assert plain["ok"] and calibrated["ok"], result["rows"]
    assert plain["path"] != calibrated["path"] and plain["positions"] == calibrated["positions"] > 0
    if qtype == "Q4_K_M":
        assert [plain["path"], calibrated["path"]] == [str(p) for p in made]
    print(f"\n{qtype} on {plain['positions']} positions, load average {result['load_average']}: mean KLD "
          f"{plain['kld_mean']:.4f} -> {calibrated['kld_mean']:.4f} with the matrix, same top "
          f"{100 * plain['same_top']:.1f}% -> {100 * calibrated['same_top']:.1f}%, PPL/base "
          f"{plain['ppl_ratio']:.3f} -> {calibrated['ppl_ratio']:.3f}")
    kld_noise = 2 * (plain["kld_se"] ** 2 + calibrated["kld_se"] ** 2) ** 0.5
    top_noise = 2 * (plain["same_top_se"] ** 2 + calibrated["same_top_se"] ** 2) ** 0.5
    assert calibrated["kld_mean"] <= plain["kld_mean"] + kld_noise
    assert calibrated["same_top"] >= plain["same_top"] - top_noise
    assert "'+ matrix': made with bundled.imatrix.gguf" in format_table(result)


def test_a_matrix_of_another_model_is_one_sentence_before_anything_is_scored(model_variant, text, tmp_path):
    import numpy as np

    from app.core.gguf.imatrix import Entry, Imatrix, write_imatrix

    other = tmp_path / "other.imatrix.gguf"
    write_imatrix(other, Imatrix(entries={"blk.0.attn_q.weight": Entry(np.ones((1, 2048), np.float32),
                                                                       np.ones(1, np.float32))}, datasets=["x"]))
    with pytest.raises(QualityError, match="computed on another model: its blk.0.attn_q.weight has 2,048 columns"):
        measure(QualityOptions(text=str(text), model=str(model_variant("F16")), quants=["Q4_K_M"], imatrix=str(other)))
    cli = subprocess.run([sys.executable, "-m", "app", "bench", "quality", "--text", str(text), "--model",
                          str(model_variant("F16")), "--quants", "Q4_K_M", "--imatrix", str(other)],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1 and "Traceback" not in cli.stderr, cli.stderr
    assert cli.stderr.startswith("hearth: ") and cli.stderr.count("\n") == 1 and "computed on another model" in cli.stderr
    with pytest.raises(QualityError, match="IQ2_XXS needs an importance matrix"):
        measure(QualityOptions(text=str(text), model=str(model_variant("F16")), quants=["IQ2_XXS"]))


@pytest.mark.heavy
def test_kv_cache_types_are_scored_against_an_f16_cache_beside_the_weights(bundled_model, model_variant, text):
    """#33: --kv-types scores the base with each KV cache type against the base with an F16 cache (flash attention
    on in all passes, as a quantized V cache needs), reported and kept beside the weights' rows. Context 512 and one
    thread keep it cheap here; the default context is the longest the text fills (test_the_kv_context_...)."""
    from app.bench.quality_store import quality_for

    base = model_variant("Q8_0")  # the fastest type to evaluate here (Q4_1 without repacking is slow on one thread)
    result = measure(QualityOptions(text=str(text), model=str(base), quants=[], ctx=128, threads=1,
                                    kv_types=["f16", "q8_0", "q4_0"], kv_ctx=512))
    print("\n" + format_table(result))
    kv = result["kv"]
    rows = {row["kv_type"]: row for row in kv["rows"]}
    assert kv["ctx"] == 512 and all(row["ok"] for row in rows.values()), rows
    f16, q8, q4 = rows["f16"], rows["q8_0"], rows["q4_0"]
    assert f16["reference"] and f16["kld_mean"] == 0.0
    assert q8["positions"] == q4["positions"] == kv["reference"]["positions"] == 255 * kv["reference"]["chunks"]
    assert 0 < q8["kld_mean"] < q4["kld_mean"] and q4["same_top"] < 1.0  # 4 bits round more than 8 (0.0003, 0.04)
    assert q4["kv_bytes"] < q8["kv_bytes"] < f16["kv_bytes"]
    table = format_table(result)
    assert "against the base with an F16 cache, context 512" in table and "\nq4_0 " in table
    from app.bench.quality_store import save_quality

    save_quality(result)
    kept = quality_for(base)
    assert kept["kv"]["ctx"] == 512 and kept["kv"]["rows"]["q4_0"]["kld_mean"] == q4["kld_mean"]
    assert kept["rows"] == {}  # a KV row is no quant the recommendation could pick


def test_the_kv_context_is_the_longest_the_text_fills_and_a_wrong_type_is_one_sentence(bundled_model, text):
    from app.bench.quality import kv_context

    assert kv_context(QualityOptions(ctx=256), 5000) == 2048
    assert kv_context(QualityOptions(ctx=256), 1500) == 1024
    assert kv_context(QualityOptions(ctx=256), 300) == 256  # a short text: the weights' context
    assert kv_context(QualityOptions(ctx=256, kv_ctx=768), 5000) == 768
    with pytest.raises(QualityError, match="Unknown KV cache type 'q5_1' in --kv-types; use f16, q8_0, q4_0"):
        measure(QualityOptions(text=str(text), model=str(bundled_model), quants=[], kv_types=["q5_1"]))
