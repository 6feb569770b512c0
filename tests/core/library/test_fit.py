"""The memory-fit estimate against the resident memory of the real engine after loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.library.fit import estimate_fit
from app.core.gguf.info import GGUFInfo
from app.protocol.messages import LoadOptions, SamplingOptions

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0", "F16", "Q4_K_M", "Q4_0", "gemma3"])
def test_estimate_within_10_percent_of_the_engines_peak_memory(model_variant, gemma3_model, kind):
    """#29: 6-20% low for a 262k-vocabulary Gemma 3 (its vocabulary's tables were not counted). The measure is the
    peak RSS of a fresh engine (a reused one keeps its last model's freed pages) once it has read a prompt and
    answered, on the bundled model's quants and on a model of Gemma 3's shape. Q4_0: its block weights are held
    twice, the file's pages and the CPU backend's repacked copy (16% low before that was counted)."""
    from app.backends.client import EngineClient

    path = gemma3_model if kind == "gemma3" else model_variant(kind)
    measured = {}
    for n_ctx in (2048, 8192):
        with EngineClient() as engine:
            engine.load(LoadOptions(model_path=str(path), n_ctx=n_ctx, kv_type="f16"))
            done = [e for e in engine.chat([{"role": "user", "content": "The quick brown fox. " * 30}],
                                           SamplingOptions(max_tokens=4, temperature=0)) if e.get("ev") == "done"][0]
        est = estimate_fit(path, n_ctx=n_ctx, kv_type="f16", gpu_available_mb=None)
        measured[n_ctx] = done["peak_rss_mb"]
        print(f"{kind} ctx={n_ctx}: estimate {est.total_mb:.0f} MB, engine peak RSS {done['peak_rss_mb']:.0f} MB")
        assert est.total_mb == pytest.approx(done["peak_rss_mb"], rel=0.10)
    # The KV cache is what grows with the context: the estimate must track the measured growth too.
    grown = estimate_fit(path, n_ctx=8192, gpu_available_mb=None).total_mb - \
        estimate_fit(path, n_ctx=2048, gpu_available_mb=None).total_mb
    # abs: peak RSS moves by a few MB from run to run (allocator pages); the Gemma 3 shape measured 9 MB estimated
    # against 12 MB grown, and at times just over 12 (a failure at the old 3 MB bound with nothing changed).
    assert grown == pytest.approx(measured[8192] - measured[2048], rel=0.15, abs=5)


def test_estimate_holds_after_a_prompt_is_processed(engine, bundled_model):
    engine.load(LoadOptions(model_path=str(bundled_model), n_ctx=2048))
    done = None
    for event in engine.complete("The quick brown fox jumps over the lazy dog. " * 40,
                                 SamplingOptions(max_tokens=4, temperature=0)):
        done = event
    est = estimate_fit(bundled_model, n_ctx=2048, gpu_available_mb=None)
    print(f"after a 400-token prompt: estimate {est.total_mb:.0f} MB, RSS {done['rss_mb']:.0f} MB")
    assert est.total_mb == pytest.approx(done["rss_mb"], rel=0.10)


def test_quantized_kv_cache_shrinks_the_estimate_like_the_engine(engine, bundled_model):
    f16 = engine.load(LoadOptions(model_path=str(bundled_model), n_ctx=8192, kv_type="f16", flash_attn="on"))
    engine.unload()
    q8 = engine.load(LoadOptions(model_path=str(bundled_model), n_ctx=8192, kv_type="q8_0", flash_attn="on"))
    est_f16 = estimate_fit(bundled_model, n_ctx=8192, kv_type="f16", gpu_available_mb=None)
    est_q8 = estimate_fit(bundled_model, n_ctx=8192, kv_type="q8_0", gpu_available_mb=None)
    assert est_q8.kv_cache_mb == pytest.approx(est_f16.kv_cache_mb * 34 / 64, rel=0.01)
    assert est_q8.total_mb == pytest.approx(q8["rss_mb"], rel=0.15)
    assert est_f16.total_mb - est_q8.total_mb == pytest.approx(f16["rss_mb"] - q8["rss_mb"], rel=0.2)


def test_verdicts_for_small_ram_and_a_gpu(bundled_model):
    tight = estimate_fit(bundled_model, n_ctx=8192, ram_available_mb=700, gpu_available_mb=None)
    assert not tight.fits and tight.verdict.startswith("Does not fit")
    assert "--ctx" in tight.verdict  # the weights fit, so a shorter context is the first hint
    assert any("--kv-type q8_0" in h for h in tight.hints)
    roomy = estimate_fit(bundled_model, n_ctx=2048, ram_available_mb=16000, gpu_available_mb=None)
    assert roomy.fits and roomy.gpu_layers == 0 and roomy.verdict.startswith("Fits in RAM")
    partial = estimate_fit(bundled_model, n_ctx=8192, ram_available_mb=16000, gpu_available_mb=800)
    assert 0 < partial.gpu_layers < 30 and "layers on the GPU" in partial.verdict
    assert partial.ram_needed_mb < partial.total_mb
    full = estimate_fit(bundled_model, n_ctx=2048, ram_available_mb=16000, gpu_available_mb=24000)
    assert full.gpu_layers == 30 and full.verdict.startswith("Fits: all 30 layers")


def test_the_fit_hint_never_suggests_a_context_beyond_the_trained_one(bundled_model):
    """#18 item 16: with memory for far more, the hint names the trained context and says why."""
    from app.core.gguf.info import read_gguf_info

    trained = read_gguf_info(bundled_model).context_length
    est = estimate_fit(bundled_model, n_ctx=1 << 24)
    assert not est.fits
    assert f"It fits with its trained context of {trained:,} tokens (--ctx {trained})" in est.verdict


# The three models of the GPU check (scripts/gpu_check.py: TinyLlama's shape and the bundled model's, random weights,
# the bundled model's 49,152-token vocabulary) as `models fit` read them there.
H200_RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results" / "gpu-h200-2026-12-04.json"
H200_SHAPES = {"random-small-q4_0": dict(embedding_size=576, layers=30, feed_forward_size=1536, heads=9, kv_heads=3),
               "random-big-q4_0": dict(embedding_size=2048, layers=22, feed_forward_size=5632, heads=32, kv_heads=4),
               "random-big-f16": dict(embedding_size=2048, layers=22, feed_forward_size=5632, heads=32, kv_heads=4)}


def h200_measured() -> dict[str, float]:
    """The engine's own memory on the H200 as nvidia-smi listed it, per model loaded alone at --ctx 4096."""
    lines = json.loads(H200_RESULTS.read_text())[
        "per-process GPU memory (nvidia-smi) of hearth serve --ctx 4096 --gpu-layers -1"]
    measured, name = {}, None
    for line in lines:
        if line.startswith("== "):
            name = line[3:] if " " not in line[3:] else None  # the run with a draft model is not a single load
        elif name and line.endswith(" MiB"):
            measured[name] = float(line.split(",")[1].split()[0])
    return measured


@pytest.mark.parametrize("name", sorted(H200_SHAPES))
def test_predicted_device_memory_within_10_percent_of_the_h200s(name):
    """#46: the fit suggested every layer but did not say what the GPU would hold, and its reserve left out CUDA's
    own context (about 570 MiB: 860 MiB held for a model whose buffers are 273). Checked against what the GPU
    reported for the engine in the recorded run."""
    fit = json.loads(H200_RESULTS.read_text())[f"fit {name}"]
    shape = H200_SHAPES[name]
    head = shape["embedding_size"] // shape["heads"]
    info = GGUFInfo(path=name, file_size=int(fit["weights_mb"] * 2**20), version=3, head_size_k=head,
                    head_size_v=head, context_length=8192, vocab_size=49152,
                    weights_bytes=int(fit["weights_mb"] * 2**20), **shape)
    est = estimate_fit(info, n_ctx=4096, gpu_available_mb=fit["gpu_free_mb"], ram_available_mb=100_000)
    assert est.gpu_layers == shape["layers"] == fit["gpu_layers"]  # all of them, as suggested there
    assert est.kv_cache_mb == fit["kv_cache_mb"]  # the same reading of the file as there
    assert est.gpu_mb == pytest.approx(h200_measured()[name], rel=0.10)


def test_no_device_memory_without_offload(bundled_model):
    est = estimate_fit(bundled_model, n_ctx=2048, gpu_available_mb=None)
    assert est.gpu_layers == 0 and est.gpu_mb is None


def test_predicted_device_memory_with_a_draft_within_10_percent_of_the_h200s():
    """The H200 run's F16 1.1B with the 135M Q4_0 as its draft, both on the GPU: 3,192 MiB."""
    results = json.loads(H200_RESULTS.read_text())
    line = next(x for x in results["per-process GPU memory (nvidia-smi) of hearth serve --ctx 4096 --gpu-layers -1"]
                if x.endswith(" MiB") and x.startswith("343,"))
    infos = {}
    for name in ("random-big-f16", "random-small-q4_0"):
        fit, shape = results[f"fit {name}"], H200_SHAPES[name]
        head = shape["embedding_size"] // shape["heads"]
        infos[name] = GGUFInfo(path=name, file_size=int(fit["weights_mb"] * 2**20), version=3, head_size_k=head,
                               head_size_v=head, context_length=8192, vocab_size=49152,
                               weights_bytes=int(fit["weights_mb"] * 2**20), **shape)
    est = estimate_fit(infos["random-big-f16"], n_ctx=4096, gpu_available_mb=142629, ram_available_mb=100_000,
                       draft=infos["random-small-q4_0"])
    assert est.gpu_mb == pytest.approx(float(line.split(",")[1].split()[0]), rel=0.10)


def _peak_with(path, n_ctx: int, draft=None) -> float:
    """The peak RSS of a fresh engine that loaded path (and its draft), read a prompt and answered."""
    from app.backends.client import EngineClient

    with EngineClient() as engine:
        engine.load(LoadOptions(model_path=str(path), n_ctx=n_ctx, kv_type="f16",
                                draft_model=str(draft) if draft else None))
        done = [e for e in engine.chat([{"role": "user", "content": "The quick brown fox. " * 30}],
                                       SamplingOptions(max_tokens=4, temperature=0)) if e.get("ev") == "done"][0]
    return done["peak_rss_mb"]


@pytest.mark.parametrize("n_ctx", [8192, 16384])
def test_the_fit_counts_the_draft_model_within_10_percent_of_the_engine(model_variant, n_ctx):
    """#49.2: the fit ignored the draft model; the engine then held 1.9x its promise. The draft's weights, its KV
    cache and its buffers count, at its own context: the target's, up to the draft's trained 8,192 tokens."""
    target, draft = model_variant("F16"), model_variant("Q4_0")
    est = estimate_fit(target, n_ctx=n_ctx, draft=draft, gpu_available_mb=None)
    alone = estimate_fit(target, n_ctx=n_ctx, gpu_available_mb=None)
    peak = _peak_with(target, n_ctx, draft)
    print(f"F16 + Q4_0 draft at {n_ctx}: estimate {est.total_mb:.0f} MB (draft {est.draft_mb:.0f} MB at "
          f"{est.draft_n_ctx} tokens), target alone {alone.total_mb:.0f} MB; engine peak RSS {peak:.0f} MB")
    assert est.draft_n_ctx == 8192 and est.draft_model == str(draft)
    assert est.total_mb == pytest.approx(peak, rel=0.10)
    assert alone.total_mb < 0.8 * peak  # what the fit promised before


def test_a_draft_that_does_not_fit_is_refused_as_the_target_would_be(model_variant):
    target, draft = model_variant("F16"), model_variant("Q4_0")
    alone = estimate_fit(target, n_ctx=8192, gpu_available_mb=None)
    with_draft = estimate_fit(target, n_ctx=8192, draft=draft, gpu_available_mb=None)
    room = (alone.total_mb + with_draft.total_mb) / 2 + 512  # the target fits; target and draft do not
    assert estimate_fit(target, n_ctx=8192, ram_available_mb=room, gpu_available_mb=None).fits
    refused = estimate_fit(target, n_ctx=8192, draft=draft, ram_available_mb=room, gpu_available_mb=None)
    assert not refused.fits
    assert refused.verdict.startswith(f"Does not fit: {target.name} with the draft model {draft.name} at 8,192 tokens")
    assert "the draft model" in refused.verdict and "of its own context" in refused.verdict


def test_the_engine_refuses_a_load_whose_draft_does_not_fit(model_variant, monkeypatch):
    """The same fit in the engine's preflight (`hearth serve`, `hearth chat` and the window's loads)."""
    from app.core.errors import ModelTooBig
    from app.engine.process.preflight import preflight

    target, draft = model_variant("F16"), model_variant("Q4_0")
    alone = estimate_fit(target, n_ctx=8192, gpu_available_mb=None).total_mb
    monkeypatch.setattr("psutil.virtual_memory", lambda: type("VM", (), {"available": (alone + 600) * 2**20})())
    preflight(LoadOptions(model_path=str(target), n_ctx=8192))
    with pytest.raises(ModelTooBig, match="with the draft model"):
        preflight(LoadOptions(model_path=str(target), n_ctx=8192, draft_model=str(draft)))
    preflight(LoadOptions(model_path=str(target), n_ctx=8192, draft_model=str(draft), draft_max=0))  # never loaded


def test_a_draft_cost_estimated_from_sizes_says_how_rough_it_is(model_variant):
    """#55 D4: "about 36% of a step (estimated from file sizes)" was 111-158% once measured; an estimate that far
    off says how rough it is, and that a load measures it."""
    from app.core.library.draft_pay import draft_verdict

    verdict = draft_verdict(str(model_variant("F16")), str(model_variant("Q4_0")))
    assert not verdict.measured and "rough guess" in verdict.sentence and "measures it" in verdict.sentence


def test_a_models_projector_is_counted_in_its_fit_where_the_load_opens_it(tiny_media, tmp_path):
    """#53: a load opens the paired mmproj beside the model (or the one named), so its weights are in the fit; the
    Models page and `hearth models fit` read fit_on, the engine's preflight its own load options."""
    from app.backends.runtime_choice import fit_on
    from app.core.library.projectors import chosen_projector

    made = tiny_media["gemma3"]
    alone = estimate_fit(made.model, n_ctx=512, ram_available_mb=8000)
    both = estimate_fit(made.model, n_ctx=512, ram_available_mb=8000, projector=made.mmproj)
    size_mb = made.mmproj.stat().st_size / 2**20
    assert both.projector_mb == pytest.approx(size_mb, abs=0.1) and both.projector == str(made.mmproj)
    assert both.total_mb == pytest.approx(alone.total_mb + size_mb, abs=0.2)
    assert fit_on(made.model, 512, "f16", runtime="cpu").projector_mb == both.projector_mb  # paired: beside it
    assert chosen_projector(made.model, None) == (str(made.mmproj), True)  # what the preflight counts
    assert chosen_projector(made.model, "none") == (None, False)
    # A model with no projector beside it: nothing is added.
    lone = tmp_path / made.model.name
    lone.symlink_to(made.model)
    assert fit_on(lone, 512, "f16", runtime="cpu").projector_mb == 0
