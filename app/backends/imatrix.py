"""Computing an importance matrix, the parent's side: the job goes to a child process (the engine's
app/engine/quantization/imatrix_worker.py, where llama.cpp runs), which the caller kills to cancel.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from app.core.errors import HearthError
from app.core.gguf.imatrix import ImatrixError

WORKER = "app.engine.quantization.imatrix_worker"


class ImatrixCancelled(HearthError):
    """The user cancelled computing a matrix; nothing was kept."""


@dataclass
class ImatrixResult:
    path: str
    model: str
    entries: int
    chunks: int
    ctx: int
    datasets: list[str]
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def default_output(model: Path) -> Path:
    from app.core import paths
    from app.core.gguf.names import strip_quant

    folder = paths.data_dir() / "imatrix"
    return folder / f"{strip_quant(model.stem)}.imatrix.gguf"


def make_imatrix(model: str | Path, docs: list[dict], datasets: list[str], out: str | Path | None = None,
                 ctx: int = 512, threads: int | None = None, progress: Callable[[int, int], None] | None = None,
                 cancel: threading.Event | None = None) -> ImatrixResult:
    """Compute the matrix of `model` (a path or a library name) in a child process and write it to `out`.
    progress(done_chunks, total_chunks)."""
    from app.core import library, paths
    from app.core.proc import JsonChild

    source = Path(library.resolve(model).path).resolve()
    target = Path(out).expanduser().resolve() if out else default_output(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    log = paths.log_dir() / f"imatrix-{source.stem}.log"
    started = time.perf_counter()
    job = {"model": str(source), "docs": docs, "datasets": datasets, "out": str(part), "ctx": int(ctx),
           "threads": threads}
    final: dict = {}

    def on_event(event: dict) -> None:
        if event.get("ev") == "chunk" and progress is not None:
            progress(int(event["done"]), int(event["total"]))
        elif event.get("ev") in ("done", "error"):
            final.update(event)

    def tick() -> None:
        if cancel is not None and cancel.is_set():
            raise ImatrixCancelled("Computing the importance matrix was cancelled; no file was kept.")

    with open(log, "wb") as err:
        try:
            with JsonChild(WORKER, log=err, stdin=json.dumps(job).encode()) as child:
                code = child.run(on_event, on_tick=tick)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
    if final.get("ev") == "error":
        part.unlink(missing_ok=True)
        raise ImatrixError(final.get("reason") or "Computing the importance matrix failed.")
    if code != 0 or final.get("ev") != "done" or not part.exists():
        part.unlink(missing_ok=True)
        from app.core.proc import exit_reason

        raise ImatrixError(f"Computing the importance matrix of {source.name} failed: {exit_reason(code)} "
                           f"(log: {log}).")
    part.replace(target)
    return ImatrixResult(path=str(target), model=str(source), entries=int(final["entries"]),
                         chunks=int(final["chunks"]), ctx=int(ctx), datasets=datasets,
                         seconds=time.perf_counter() - started)
