"""The engine's step clock: when the step it is in began, in memory the supervisor reads without a message.

A step is one token (sampling included: a grammar samples there) or one prompt batch. llama.cpp cannot be
interrupted inside either, and some inputs make one run for ever (a highly ambiguous grammar, issue 48); the
supervisor's watchdog (app/backends/supervisor.py) ends the engine process when a step runs past its budget.
For that it must see how long the current step has run, and a pipe message per token would cost the token
fast path a write and a wake-up. So the engine writes two doubles into a small shared file mapping at the
start of each step (a store into memory, well under a microsecond), and the supervisor's thread reads them:

    [0] when the step began (time.monotonic(), the same clock in every process of the machine); 0: no step
    [1] how many tokens the step decodes (1 for a token, the batch's size for a prompt batch): its budget
        grows with them

Without a clock (the engine run in-process by tests and benchmarks) mark() and idle() do nothing.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile
import time
from app.core import env

ENV = env.STEP_CLOCK.name  # the path of the clock's file, set by the supervisor for its engine
# How the watchdog's sentence to the requests it ends begins (app/backends/supervisor.py): the API server tells
# its error from an engine crash by it (app/server/edge/errors.py); tests/server/edge/test_watchdog.py holds the
# two together.
WATCHDOG_SAYS = "Hearth's watchdog stopped the engine"
SIZE = 16
_Cells = ctypes.c_double * 2


class StepClock:
    """The file and its mapping; the supervisor makes one per engine process (create), the engine opens it."""

    def __init__(self, path: str | None = None):
        if path is None:
            folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
            fd, path = tempfile.mkstemp(prefix="hearth-step-", suffix=".clock", dir=folder)
            os.write(fd, bytes(SIZE))
            self.owner = True
        else:
            fd = os.open(path, os.O_RDWR)
            self.owner = False
        self.path = path
        try:
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self.cells = _Cells.from_buffer(self._map)

    def running_for(self, now: float | None = None) -> tuple[float, float] | None:
        """(seconds the current step has run, its tokens), or None when the engine is between steps."""
        started, units = self.cells[0], self.cells[1]
        if started <= 0:
            return None
        return max(0.0, (now if now is not None else time.monotonic()) - started), max(1.0, units)

    def close(self) -> None:
        cells, self.cells = self.cells, None
        del cells  # the mapping cannot close while a ctypes view holds it
        try:
            self._map.close()
        except (BufferError, ValueError):
            pass
        if self.owner:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _nothing(units: float = 1) -> None:
    pass


def _no_idle() -> None:
    pass


# The engine's hooks; attach() points them at its clock. Looked up at each call (step_clock.mark(...)).
mark = _nothing
idle = _no_idle


def attach() -> StepClock | None:
    """In the engine process: open the supervisor's clock, if it gave one, and start writing into it."""
    global mark, idle
    path = env.STEP_CLOCK.get()
    if not path:
        return None
    try:
        clock = StepClock(path)
    except (OSError, ValueError):
        return None  # no watchdog for this engine; it answers all the same
    cells = clock.cells
    now = time.monotonic

    def _mark(units: float = 1) -> None:
        cells[1] = units
        cells[0] = now()

    def _idle() -> None:
        cells[0] = 0.0

    mark, idle = _mark, _idle
    return clock
