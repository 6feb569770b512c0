"""Child process that computes an importance matrix (app/engine/quantization/imatrix.py) and writes it.

`python -m app.engine.quantization.imatrix_worker` (or the frozen app's --imatrix-worker flag) reads one JSON job on stdin
({model, docs, datasets, out, ctx, threads}) and answers in JSON lines: `chunk` {done, total} after each chunk,
then `done` {entries, chunks} or `error` {reason} (a sentence for the user). A process of its own so that the
parent can cancel it by killing it, and so that a llama.cpp crash costs the job, never the window.
"""

from __future__ import annotations

import json
import sys

from app.core.errors import HearthError
from app.core.proc import emit, keep_stdout_for_events


def main(argv: list[str] | None = None) -> int:
    keep_stdout_for_events()  # llama.cpp's own output goes to stderr, the parent's log
    job = json.loads(sys.stdin.buffer.read())
    from app.core.gguf.imatrix import write_imatrix
    from app.engine.quantization.imatrix import compute

    try:
        matrix = compute(job["model"], job["docs"], job["datasets"], int(job["ctx"]), job.get("threads"),
                         on_chunk=lambda done, total: emit("chunk", done=done, total=total))
        write_imatrix(job["out"], matrix)
    except HearthError as exc:
        emit("error", reason=str(exc))
        return 1
    emit("done", entries=len(matrix.entries), chunks=matrix.chunk_count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
