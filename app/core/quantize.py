"""Requantize a GGUF model with llama.cpp's own quantizer, in a child process.

The child (app/core/quantize_worker.py) writes to `<output>.part`; the parent
polls it for progress, kills the child on cancel, and renames the file when
the child succeeds. The result is recorded in the library (source
"quantized", owned by Hearth) so it lists and loads like any other model.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from app.core import library, paths
from app.core.errors import HearthError, ModelFileError
from app.core.gguf_info import SEED_NAMES, read_gguf_info
from app.engine.spawn import child_command, child_env

# GGUF type -> approximate bits per weight of the whole file (for the progress estimate and the size hint).
QUANT_TYPES = {"F16": 16.0, "Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.7, "Q4_K_M": 4.85, "Q4_0": 4.55}
POLL_S = 0.1


class QuantizeCancelled(HearthError):
    """The user cancelled a quantization; nothing was kept."""


@dataclass
class QuantizeResult:
    path: str
    type: str
    seed_name: str | None
    size_bytes: int
    source: str
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def type_label(qtype: str) -> str:
    """'Q4_K_M' -> 'Q4_K_M (INT4)'."""
    seed = SEED_NAMES.get(qtype)
    return f"{qtype} ({seed})" if seed else qtype


def _strip_quant(stem: str) -> str:
    return re.sub(r"[-._](I?Q\d(_[A-Z0-9]+)*|BF16|F16|F32)$", "", stem, flags=re.I)


def default_output(source: Path, qtype: str) -> Path:
    return paths.models_dir() / f"{_strip_quant(source.stem)}-{qtype}.gguf"


def quantize(model: str | Path, qtype: str, out: str | Path | None = None,
             progress: Callable[[int, int], None] | None = None, cancel: threading.Event | None = None,
             threads: int | None = None) -> QuantizeResult:
    """Quantize `model` (a path or a library name) to `qtype`; returns the new file, already in the library.

    progress(done_bytes, total_bytes) follows the output file's growth against its expected size.
    """
    qtype = qtype.upper()
    if qtype not in QUANT_TYPES:
        raise HearthError(f"Unknown quantization type '{qtype}'; use one of {', '.join(QUANT_TYPES)}.")
    source = Path(library.resolve(model).path).resolve()
    info = read_gguf_info(source)
    if info.split_count > 1:
        raise ModelFileError(f"{source.name} is a split GGUF set; quantizing split sets is not supported yet.")
    target = Path(out).expanduser().resolve() if out else default_output(source, qtype)
    if target == source:
        raise HearthError("The output file would overwrite the model being quantized; choose another --out.")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    expected = int(info.parameters * QUANT_TYPES[qtype] / 8) or 1
    log = paths.log_dir() / f"quantize-{target.stem}.log"
    started = time.perf_counter()
    cmd = child_command("app.core.quantize_worker", str(source), str(part), qtype, "--threads", str(threads or 0))
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=child_env())
        try:
            while proc.poll() is None:
                if cancel is not None and cancel.is_set():
                    raise QuantizeCancelled("Quantization cancelled; no file was kept.")
                if progress is not None and part.exists():
                    progress(min(part.stat().st_size, expected - 1), expected)
                time.sleep(POLL_S)
        except BaseException:  # cancelled or interrupted: the child must not outlive us
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            part.unlink(missing_ok=True)
            raise
    if proc.returncode != 0 or not part.exists():
        part.unlink(missing_ok=True)
        raise HearthError(f"Quantizing {source.name} to {qtype} failed: {_last_reason(log)} (log: {log}).")
    part.replace(target)
    size = target.stat().st_size
    if progress is not None:
        progress(size, size)
    library.register(target, "quantized", owned=True)
    return QuantizeResult(path=str(target), type=qtype, seed_name=SEED_NAMES.get(qtype), size_bytes=size,
                          source=str(source), seconds=time.perf_counter() - started)


def _last_reason(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no reason given"
    errors = [ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    return (errors or lines or ["no reason given"])[-1][:300]
