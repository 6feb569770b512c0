"""The child process of app/bench/jobs.py: one benchmark job, where llama.cpp may crash without the window.

`python -m app.bench.job_worker` (the frozen app: --bench-job) reads {"target": "module:function", "kwargs"}
as JSON on stdin and answers in JSON lines: `progress` {fraction, message}, then `done` {result} or `error`
{message} (a sentence for the user).
"""

from __future__ import annotations

import importlib
import inspect
import json
import signal
import sys
import threading

from app.core.errors import HearthError
from app.core.proc import emit, keep_stdout_for_events


def main() -> int:
    keep_stdout_for_events()  # llama.cpp's own output goes to stderr, the parent's log
    from app.bench.jobs import JOBS

    job = json.loads(sys.stdin.buffer.read())
    if job.get("target") not in JOBS:
        emit("error", message=f"not a job: {job.get('target')}")
        return 2
    module, _, function = job["target"].partition(":")
    run = getattr(importlib.import_module(module), function)
    # The parent's cancel is SIGTERM: the job is told through `cancel` where it takes one (the matrix stops its
    # own children), and its next progress report raises where it does not.
    cancelled = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: cancelled.set())

    def progress(fraction: float, message: str) -> None:
        if cancelled.is_set():
            raise HearthError("Cancelled.")
        emit("progress", fraction=fraction, message=message)

    kwargs = dict(job.get("kwargs", {}))
    if "cancel" in inspect.signature(run).parameters:
        kwargs["cancel"] = cancelled
    try:
        result = run(**kwargs, progress=progress)
    except HearthError as exc:
        emit("error", message=str(exc))
        return 1
    emit("done", result=result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
