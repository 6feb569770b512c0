"""#49.6: an answer's "peak engine memory" is the peak during that answer, not the engine's lifetime high."""

from __future__ import annotations

import pytest

from app.protocol.messages import LoadOptions, SamplingOptions


def _answer(engine) -> dict:
    return [e for e in engine.chat([{"role": "user", "content": "Say hello."}],
                                   SamplingOptions(max_tokens=4, temperature=0)) if e.get("ev") == "done"][0]


def test_the_peak_of_an_answer_is_not_an_earlier_bigger_models(engine, bundled_model, model_variant):
    big = engine.load(LoadOptions(model_path=str(model_variant("F16")), n_ctx=32768))
    first = _answer(engine)
    assert first["peak_rss_mb"] >= 0.9 * big["rss_mb"]
    engine.unload()
    small = engine.load(LoadOptions(model_path=str(bundled_model), n_ctx=2048))
    done = _answer(engine)
    print(f"big model's answer: peak {first['peak_rss_mb']:.0f} MB; small model loaded at {small['rss_mb']:.0f} MB, "
          f"its answer's peak {done['peak_rss_mb']:.0f} MB (RSS after it {done['rss_mb']:.0f} MB)")
    assert done["peak_rss_mb"] < 0.6 * first["peak_rss_mb"]  # before: the engine's lifetime high, the big one's
    assert done["peak_rss_mb"] == pytest.approx(done["rss_mb"], rel=0.10)


def test_answers_side_by_side_keep_each_their_own_peak():
    """A later answer's start resets the kernel's mark; the one still running keeps what it had reached."""
    from app.core.metrics import AnswerPeak

    first = AnswerPeak()
    grown = bytearray(80 * 2**20)  # 80 MB made resident while the first answer runs, and given back
    grown[:: 4096] = b"x" * len(grown[:: 4096])
    del grown
    second = AnswerPeak()
    second_peak = second.end()
    first_peak = first.end()
    assert first_peak >= second_peak + 60
