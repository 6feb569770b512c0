"""llama.cpp's own `llama-perplexity`, built from the pinned sdist beside the Vulkan runtime, as the reference that
`hearth bench quality`'s figures are checked against (#33)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

TOOL = "llama-perplexity"
FIGURES = {
    "kld_mean": r"Mean\s+KLD:\s+(-?[\d.]+)",
    "kld_p99": r"99\.0%\s+KLD:\s+(-?[\d.]+)",
    "same_top": r"Same top p:\s+([\d.]+)",  # percent
    "ppl": r"Mean PPL\(Q\)\s+:\s+([\d.]+)",
    "ppl_base": r"Mean PPL\(base\)\s+:\s+([\d.]+)",
    "chunks": r"kl_divergence: computing over (\d+) chunks",
}


def llama_perplexity() -> Path | None:
    """$HEARTH_LLAMA_PERPLEXITY, else the one built with a cached Vulkan runtime (--tools; portable or native),
    else None."""
    from app.core.making.runtime_build import find_tool

    return find_tool(TOOL, os.environ.get("HEARTH_LLAMA_PERPLEXITY"), portable_first=True)


def _run(tool: Path, args: list[str]) -> str:
    # On the CPU, as Hearth scores: no device offload, and no repacked weights (bench quality loads without the
    # extra buffer types). Without GGML_VK_VISIBLE_DEVICES, ggml's Vulkan backend skips lavapipe (a CPU device).
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    cmd = [str(tool), *args, "-dev", "none", "-ngl", "0", "--no-repack", "-t", str(os.cpu_count() or 2)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{out[-3000:]}"
    return out


def run_kl_divergence(tool: Path, base: str, quant: str, text: Path, ctx: int, work: Path) -> dict:
    """llama-perplexity --kl-divergence-base on base (once per base file), then --kl-divergence on quant; its
    figures: kld_mean, kld_p99, same_top (percent), ppl, ppl_base, chunks. One chunk per batch (-b = -c), as
    Hearth evaluates them."""
    logits = work / f"{Path(base).stem}-{ctx}.kld"
    common = ["-c", str(ctx), "-b", str(ctx), "--kl-divergence-base", str(logits)]
    if not logits.exists():
        _run(tool, ["-m", base, "-f", str(text), *common])
    out = _run(tool, ["-m", quant, *common, "--kl-divergence"])
    figures = {}
    for key, pattern in FIGURES.items():
        found = re.search(pattern, out)
        assert found, f"no {key} in llama-perplexity's output:\n{out[-3000:]}"
        figures[key] = int(found.group(1)) if key == "chunks" else float(found.group(1))
    return figures
