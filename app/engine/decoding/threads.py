"""Adaptive threads: the thread count that makes tokens fastest now, not on an idle machine.

llama.cpp's worker threads meet at a barrier after every operation, so when another program takes one core,
one preempted worker stalls them all: on two cores with one busy, two threads gave 5 tok/s where one gave 75.
A fixed count (what LM Studio, Ollama and llama-server use) collapses like that. Hearth owns its decode loop,
and `llama_set_n_threads` changes a context's threads between two decodes for free, so the engine times its
own tokens and moves the count between 1 and the physical cores:

- tokens are timed in windows (WINDOW tokens or WINDOW_S seconds, whichever comes first); a window's median
  is the figure, so one slow token is noise;
- after each window it looks at how much CPU other programs use (a cheap reading of the system's and its
  own CPU time): when others take a core's worth, a lower count is tried; when they leave, a higher one;
- when the median at the count in use rises well above its recent best (SLOWDOWN), a lower count is tried
  too (a sign of contention that the CPU reading may miss, e.g. a busy hypervisor);
- a try ("probe") runs one window at the other count and must be MARGIN faster to be kept, so noise never
  makes the count oscillate; a probe whose tokens come far slower (ABORT) ends at once, so trying two
  threads on a busy machine costs a token, not a window (a probe of fewer threads runs its whole window: on
  a loaded machine any one token can stall); a probe that loses waits twice as long before the same kind
  of probe again.

One exception: a greedy answer whose context passes SPLIT_KV_CELLS holds the full count (see there), so that
the same request gives the same answer on a quiet and on a busy machine.

The controller sees only numbers (recorded traces in tests, token times in the engine); the Runtime applies
its decisions.
"""

from __future__ import annotations

import os
import time
from typing import Callable

WINDOW = 16  # tokens per measured window at most
WINDOW_S = 0.1  # seconds per window at most (at least MIN_TOKENS tokens, unless one token alone takes that)
MIN_TOKENS = 2
MARGIN = 0.10  # a probed count must be this much faster to be kept
SLOWDOWN = 1.35  # the median this much above its recent best: probe a lower count at once
ABORT = 2.5  # a token this much slower than the count it left ends a probe of more threads
BUSY_CORES = 0.5  # other programs using at least this many cores: try fewer threads
FREE_CORES = 0.25  # at most this many: try more
FIRST_BACKOFF = 1  # windows between probes of one kind, doubled after each probe of that kind that loses
MAX_BACKOFF = 64
DRIFT = 1.02  # per window, a remembered best forgets itself slowly (the machine changes)
# llama.cpp's CPU flash attention splits the KV cache across the threads for a one-token decode once its KV view
# reaches 512 cells (ggml-cpu ops.cpp, use_split_kv_path; the view grows in steps of 256 cells, so: once more than
# 256 are used), and the partial sums are added in an order that follows the thread count. The last bits of a
# logit, and so a greedy answer, then depend on how many threads ran (measured: 1 and 2 threads gave different
# 300-token greedy answers; with flash attention off, or a quantized KV cache, which takes another path, they
# were the same). Below it every count computes the same sums. So a greedy answer holds one count past it.
SPLIT_KV_CELLS = 256


class ThreadController:
    def __init__(self, max_threads: int, others_cores: Callable[[], float | None] | None = None,
                 start: int | None = None, others_now: Callable[[], float | None] | None = None):
        """others_cores(): cores' worth of CPU that other programs used since the last call (None: unknown);
        others_now(): how many other programs' threads want a core at this instant (None: unknown)."""
        self.max = max(1, int(max_threads))
        self.current = min(self.max, start or self.max)
        self.others_cores = others_cores or (lambda: None)
        self.others_now = others_now or (lambda: None)
        self.reason = f"{self.current} of {self.max} threads"
        self.changes = 0  # how many times the count moved (probes included)
        self._times: list[float] = []
        self._skip = 1  # tokens not timed after a change: the workers wake up
        self._best: dict[int, float] = {}
        self._median: dict[int, float] = {}
        self._home: int | None = None  # the count a probe returns to, while one runs
        self._backoff = {"down": FIRST_BACKOFF, "up": FIRST_BACKOFF}
        self._wait = {"down": 0, "up": 0}  # windows until that kind of probe may run again

    def start_of_answer(self) -> int | None:
        """Before an answer's prompt: if other programs hold cores right now, start with the cores left.

        On a loaded machine the very first token at the full count can stall for seconds (measured: 3 s on two
        busy cores), long before a window could show it; the probes go on from wherever this starts.
        """
        busy = self.others_now()
        if busy is None:
            return None
        # The program that sent this request (the window, the API server) is not counted (runnable_others).
        target = max(1, min(self.max, self.max - int(busy)))
        if target < self.current or (target > self.current and busy < FREE_CORES):
            self._home = None
            self._times.clear()
            self._switch(target)
            self._explain(freed_up=target == self.max)
            return target
        return None

    def observe(self, seconds: float) -> int | None:
        """One token's time at the current count; the count to switch to, or None to keep it."""
        if self._skip:
            self._skip -= 1
            return None
        home = self._home
        if home is not None and self.current > home and seconds > self._median[home] * ABORT:
            # More threads on a busy machine collapse at once: no need to finish the window. (A probe of fewer
            # threads always runs its window: on a loaded machine any single token can stall.)
            return self._end_probe(seconds)
        self._times.append(seconds)
        n = len(self._times)
        if n < WINDOW and seconds < WINDOW_S and (n < MIN_TOKENS or sum(self._times) < WINDOW_S):
            return None
        times = sorted(self._times)
        self._times.clear()
        median = times[len(times) // 2]
        if home is not None:
            return self._end_probe(median)
        return self._judge(median)

    def hold(self) -> int:
        """A greedy answer must not depend on the count from here on (Runtime.hold_threads): the full count,
        kept until released; returns it."""
        self._home = None
        self._times.clear()
        if self.current != self.max:
            self._switch(self.max)
        self.reason = (f"{self.max} of {self.max} threads, held: a greedy answer past {SPLIT_KV_CELLS} tokens of "
                       "context keeps one count, so that it is the same answer on a busy machine")
        return self.max

    def release(self) -> None:
        self._skip = 1
        self._explain(freed_up=False)

    # --- inside ----------------------------------------------------------------
    def _judge(self, median: float) -> int | None:
        n = self.current
        self._median[n] = median
        best = self._best.get(n)
        self._best[n] = median if best is None else min(best * DRIFT, median)
        for kind in self._wait:
            self._wait[kind] = max(0, self._wait[kind] - 1)
        others = self.others_cores()
        slowed = best is not None and median > best * SLOWDOWN
        if n > 1 and (slowed or (others is not None and others >= BUSY_CORES)) and not self._wait["down"]:
            return self._probe(n - 1)
        if n < self.max and (others is None or others <= FREE_CORES) and not self._wait["up"]:
            return self._probe(n + 1)
        return None

    def _probe(self, target: int) -> int:
        self._home = self.current
        return self._switch(target)

    def _end_probe(self, median: float) -> int | None:
        home, probed = self._home, self.current
        kind = "up" if probed > home else "down"
        self._home = None
        self._times.clear()
        # A move down must win by MARGIN: noise alone must never take threads away. A move up is a probe made
        # with the CPU free, towards the count a free machine runs at: it stays unless it is slower. (Holding it
        # to the margin too kept one thread on a CPU where two are only 13-15% faster: a probe window with one
        # preempted token lost, and each loss doubled the wait before the next.)
        needed = 1 - MARGIN if kind == "down" else 1.0
        if median < self._median[home] * needed:  # the probed count is faster: it stays
            self._median[probed] = self._best[probed] = median
            self._backoff[kind] = FIRST_BACKOFF
            self._explain(freed_up=kind == "up")
            return None
        self._wait[kind] = self._backoff[kind]
        self._backoff[kind] = min(self._backoff[kind] * 2, MAX_BACKOFF)
        self._switch(home)
        self._explain(freed_up=False)
        return home

    def _switch(self, n: int) -> int:
        self.current = n
        self.changes += 1
        self._skip = 1
        return n

    def _explain(self, freed_up: bool) -> None:
        n, top = self.current, self.max
        if n < top:
            self.reason = f"{n} of {top} threads: other programs are using the CPU"
        elif freed_up:
            self.reason = f"{n} of {top} threads: the CPU is free again"
        else:
            self.reason = f"{n} of {top} threads"


def runnable_others(samples: int = 3, gap_s: float = 0.001) -> float | None:
    """Threads of other programs that want a core now: Linux's count of runnable threads (/proc/loadavg, a file
    read of a few microseconds) less this process's and its parent's, the least of a few samples a millisecond
    apart (a thread that wakes for a moment is not a busy program). None where it cannot be read.

    Neither this engine nor the program that started it is another program (as in OthersCpu): right after a
    decode llama.cpp's workers spin for a few milliseconds before they sleep, and the window or the API server
    has just handed over the request. Counting them started answers on one thread on an idle machine."""
    parent = os.getppid()
    counts = []
    for i in range(samples):
        if i:
            time.sleep(gap_s)
        try:
            with open("/proc/loadavg", "rb") as fh:
                running = int(fh.read().split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            return None
        ours = max(1, running_threads("self")) + (running_threads(str(parent)) if parent > 1 else 0)
        counts.append(running - ours)
    return max(0, min(counts))


def running_threads(pid: str) -> int:
    """How many of a process's threads are running or want to (state R); 0 where they cannot be read."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    n = 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # the thread ended meanwhile
            continue
        # "tid (name) S ...": the name may hold spaces and parentheses, the state follows the last one.
        end = stat.rfind(b")")
        if stat[end + 2:end + 3] == b"R":
            n += 1
    return n


class OthersCpu:
    """Cores' worth of CPU time that other processes used between two calls (psutil, about 50 us a call).

    The engine's parent (the window, `hearth serve`, the CLI) counts as this work, not as another program:
    the window drawing the streamed answer must not make the engine give up a thread.
    """

    def __init__(self):
        import psutil

        self._psutil, self._clock = psutil, time.monotonic
        self._me = psutil.Process()
        try:
            parent = psutil.Process(os.getppid())
            self._parent = parent if os.getppid() > 1 else None
        except psutil.Error:
            self._parent = None
        self._last = self._read()

    def _read(self) -> tuple[float, float, float]:
        t = self._psutil.cpu_times()
        busy = sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))
        mine = self._me.cpu_times()
        ours = mine.user + mine.system
        if self._parent is not None:
            try:
                theirs = self._parent.cpu_times()
                ours += theirs.user + theirs.system
            except self._psutil.Error:  # the parent is gone: this engine is about to exit anyway
                self._parent = None
        return self._clock(), busy, ours

    def __call__(self) -> float | None:
        try:
            now = self._read()
        except Exception:  # a platform that cannot tell: decide from token times alone
            return None
        (t0, busy0, mine0), (t1, busy1, mine1) = self._last, now
        self._last = now
        if t1 - t0 < 0.05:
            return None  # too short to say
        return max(0.0, ((busy1 - busy0) - (mine1 - mine0)) / (t1 - t0))
