"""A benchmark or a quality measurement run for the window in a child process, never in the window's own.

Both load models through llama.cpp (the matrix's quality rows, `bench quality`'s scoring), and llama.cpp must
run only in processes whose crash costs the job, not the window. run_job(target, kwargs, progress, cancel)
starts app/bench/job_worker.py, which calls target ("module:function", one of JOBS) with kwargs and a
progress(fraction, message) of its own; its progress comes back as events, its result (a JSON dict) as the
last one. Cancel kills the child. This module imports nothing that loads llama.cpp.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

from app.core import paths
from app.core.errors import HearthError
from app.core.proc import EVENT, JsonChild, exit_reason

WORKER = "app.bench.job_worker"
# What the window may run this way: the benchmark matrix and a quality measurement kept for the quantize pane.
JOBS = ("app.bench.matrix:run_matrix", "app.bench.quality:measure_and_keep")
CANCEL_S = 10.0


class JobCancelled(HearthError):
    pass


def run_job(target: str, kwargs: dict, progress: Callable[[float, str], None] | None = None,
            cancel: threading.Event | None = None) -> dict:
    if target not in JOBS:
        raise ValueError(f"not a job: {target}")
    final: dict = {}

    def on_event(event: dict) -> None:
        if event.get(EVENT) == "progress" and progress is not None:
            progress(float(event.get("fraction", 0.0)), str(event.get("message", "")))
        elif event.get(EVENT) in ("done", "error"):
            final.update(event)

    asked_at: list[float] = []

    def tick() -> None:
        # Cancel asks the child to stop (SIGTERM: it stops the matrix's own children and exits); one that has not
        # exited within CANCEL_S is killed.
        if cancel is not None and cancel.is_set():
            if not asked_at:
                asked_at.append(time.monotonic())
                child.proc.terminate()
            elif time.monotonic() - asked_at[0] > CANCEL_S:
                raise JobCancelled("Cancelled.")

    log = paths.log_dir() / f"job-{target.rpartition(':')[2]}.log"
    with open(log, "wb") as err, JsonChild(WORKER, log=err, stdin=json.dumps({"target": target, "kwargs": kwargs})
                                          .encode()) as child:
        code = child.run(on_event, on_tick=tick)
    if cancel is not None and cancel.is_set():
        raise JobCancelled("Cancelled.")
    if final.get(EVENT) == "error":
        raise HearthError(final.get("message") or "The job failed.")
    if final.get(EVENT) != "done":
        raise HearthError(f"The job stopped: {exit_reason(code)} (log: {log}).")
    return final["result"]
