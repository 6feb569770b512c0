"""The tiny image and audio models (app/devtools/tiny_media.py) for tests: made once per recipe and cached."""

from __future__ import annotations

import importlib.util

import pytest

MAKERS = ("torch", "transformers", "sentencepiece", "conversion")


def tiny_media_models():
    """{family: TinyModel}; skips the test when the makers (the `convert` extra) are not installed."""
    missing = [name for name in MAKERS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the tiny media models are made with {', '.join(missing)}: install hearth[convert]")
    from app.devtools.tiny_media import ensure

    return ensure()
