"""`hearth bench media` (#53): Hearth against llama.cpp's llama-mtmd-cli on the same tiny model that sees, as a user
runs it. Without llama-mtmd-cli it says how to get it in one sentence; with it (built beside an engine runtime with
`--tools`, the heavy tier), both sides are timed and a repeated image costs no second encode."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.bench.media import CLI_ENV, find_cli


def bench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "app", "bench", "media", *args], capture_output=True, text=True,
                          timeout=900, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_without_llama_mtmd_cli_or_a_projector_it_says_what_to_do(tiny_media, bundled_model, tmp_path):
    made = tiny_media["gemma3"]
    proc = bench("--model", str(made.model), env={CLI_ENV: str(tmp_path / "no-such-cli")})
    assert proc.returncode == 1 and "hearth runtimes build vulkan --tools" in proc.stderr, proc.stderr
    proc = bench("--model", str(bundled_model))
    assert proc.returncode == 1 and "has no projector beside it" in proc.stderr, proc.stderr
    proc = bench("--model", str(made.model), "--gpu-layers", "-1")
    assert proc.returncode == 1 and "measures on the CPU" in proc.stderr, proc.stderr


@pytest.mark.heavy  # a benchmark command's own run, beside llama.cpp's tool built from the sdist
def test_both_sides_are_timed_on_the_same_image_and_a_repeated_image_is_not_encoded_again(tiny_media):
    if find_cli() is None:
        pytest.skip("llama-mtmd-cli is not built (HEARTH_TEST_LLAMA_TOOLS=1 bash tests/run.sh --heavy builds it)")
    made = tiny_media["gemma3"]
    proc = bench("--model", str(made.model), "--tokens", "16", "--repeats", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    print(json.dumps(result, indent=1))
    for side in ("hearth", "llama_mtmd_cli"):
        assert result[side]["encode_s"] > 0 and result[side]["prompt_s"] >= result[side]["encode_s"]
        assert result[side]["gen_tok_s"] > 0
    assert all(r > 0 for r in result["ratios"].values())
    assert result["repeat"]["media_encoded"] == 0  # the same image in the same chat: kept, not encoded again
