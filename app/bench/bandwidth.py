"""Memory bandwidth of this machine, measured the way generation uses memory.

Generating one token reads every weight once, so the ceiling on tokens per second is
(read bandwidth) / (bytes of weights read per token). The measurement:

- an array of `size_mb` (default 256 MiB, far larger than any CPU cache) is split into one
  slice per thread, and the threads (as many as llama.cpp uses) sum their slices as int64
  at the same time; numpy releases the GIL inside the reduction, so the threads really run
  in parallel and the loop is a plain streaming read;
- read GB/s = bytes summed / wall time, best of `repeats` passes (the STREAM convention:
  the best pass is the one least disturbed by other work on the machine);
- a copy pass (np.copyto) is reported too, counted as read + write bytes like STREAM's Copy.

GB here is 10^9 bytes, as memory vendors and STREAM count.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from app.core.metrics import default_threads


def _parallel(work, threads: int) -> float:
    """Run work(slice_index) on `threads` threads at once; wall seconds from a common start."""
    barrier = threading.Barrier(threads + 1)

    def body(i: int) -> None:
        barrier.wait()
        work(i)

    pool = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - started


def measure_bandwidth(threads: int | None = None, size_mb: int = 256, repeats: int = 5) -> dict:
    threads = max(1, threads or default_threads())
    n = size_mb * 1024 * 1024 // 8
    src = np.ones(n, dtype=np.int64)  # ones, not empty: untouched pages would read as the zero page
    dst = np.zeros_like(src)
    bounds = np.linspace(0, n, threads + 1, dtype=np.int64)
    src_parts = [src[bounds[i]:bounds[i + 1]] for i in range(threads)]
    dst_parts = [dst[bounds[i]:bounds[i + 1]] for i in range(threads)]
    sums = [0] * threads

    def read(i: int) -> None:
        sums[i] = int(src_parts[i].sum())

    def copy(i: int) -> None:
        np.copyto(dst_parts[i], src_parts[i])

    read_s = [_parallel(read, threads) for _ in range(repeats)]
    copy_s = [_parallel(copy, threads) for _ in range(repeats)]
    if sum(sums) != n:  # the reduction really read every element
        raise RuntimeError("bandwidth measurement read the wrong data")
    nbytes = src.nbytes
    return {
        "read_gb_s": nbytes / min(read_s) / 1e9,
        "copy_gb_s": 2 * nbytes / min(copy_s) / 1e9,
        "read_gb_s_runs": [nbytes / s / 1e9 for s in read_s],
        "threads": threads,
        "size_mb": size_mb,
        "method": "numpy int64 sum (read) and np.copyto (read+write) over a "
                  f"{size_mb} MiB array split across {threads} threads, best of {repeats}",
    }


if __name__ == "__main__":
    import json

    print(json.dumps(measure_bandwidth(), indent=2))
