"""Token events merged over a short interval, for clients that draw rather than print.

A terminal wants every token as it comes; a window redraws its transcript a
few dozen times a second at most. Sending it one event per token costs the
client a pipe read, a JSON parse and a cross-thread signal per token, and on
a machine whose cores are all busy with the engine's threads that CPU time
comes straight out of generation speed. With an interval the engine sends
the first token at once (time to first token is unchanged) and then at most
one token event per interval; any other event (stats, done, error) first
flushes what is pending, so the order of text and events never changes.
"""

from __future__ import annotations

import time
from typing import Callable

from app.protocol.messages import TOKEN


def coalescing(emit: Callable[[dict], None], interval_ms: float) -> Callable[[dict], None]:
    """emit itself when interval_ms <= 0, else an emitter that merges token events."""
    if not interval_ms or interval_ms <= 0:
        return emit
    return TokenCoalescer(emit, interval_ms / 1000.0)


class TokenCoalescer:
    def __init__(self, emit: Callable[[dict], None], interval_s: float):
        self._emit = emit
        self.interval_s = interval_s
        self._pending: list[str] = []
        self._next = 0.0  # the first token goes out at once

    def __call__(self, event: dict) -> None:
        if event.get("ev") == TOKEN and len(event) == 2:
            self._pending.append(event["text"])
            if time.perf_counter() >= self._next:
                self.flush()
            return
        self.flush()
        self._emit(event)

    def flush(self) -> None:
        """Send what is pending now; the next merged event goes out an interval later."""
        if self._pending:
            self._next = time.perf_counter() + self.interval_s
            text = "".join(self._pending)
            self._pending.clear()
            self._emit({"ev": TOKEN, "text": text})
