"""The tiny media models the tests make for themselves (tests/helpers/tiny_media.py): small, projectors as projectors,
and the same bytes every time."""

from __future__ import annotations

import filecmp

import pytest

from tests.helpers.tiny_media import MAKERS


def _architecture(path) -> str:
    from app.core.gguf.info import read_gguf_info

    return read_gguf_info(path).metadata.get("general.architecture")


def test_each_family_is_a_small_text_model_beside_its_projector(tiny_media):
    assert set(tiny_media) == {"gemma3", "qwen2vl", "qwen2audio"}
    for family, made in tiny_media.items():
        assert made.model.parent == made.mmproj.parent  # one folder: what a download looks like
        assert "mmproj" in made.mmproj.name
        assert made.model.stat().st_size + made.mmproj.stat().st_size < 1_500_000, family
        assert _architecture(made.mmproj) == "clip"
        assert _architecture(made.model) != "clip"


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
@pytest.mark.slow
def test_making_again_gives_the_same_bytes(tiny_media, tmp_path):
    import importlib.util

    if any(importlib.util.find_spec(name) is None for name in MAKERS):
        pytest.skip("needs the makers")
    from tests.helpers.tiny_media import make

    again = make(tmp_path, ["gemma3"])["gemma3"]
    assert filecmp.cmp(again.model, tiny_media["gemma3"].model, shallow=False)
    assert filecmp.cmp(again.mmproj, tiny_media["gemma3"].mmproj, shallow=False)
