"""The requests an engine is answering: the one owner of "the model is busy".

A request is taken when it is sent and released when its last event comes (Done, Ok or Failed), when the
engine dies, or when it could not be sent at all; nothing else adds or removes one. Before this had one
owner, a request whose text could not be encoded for the pipe (a lone surrogate) stayed taken for good: the
model answered "busy" to /health, --ttl never unloaded it, and a request for another model got 503 (issue 48).

A request's sink is the caller's code, run on the engine's reader thread: one that raises is logged, never
allowed to end the reader (every later event, and the news of a crash, would be lost with it).

Not locked: the supervisor calls it under its own lock.
"""

from __future__ import annotations

import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from app.backends.backend import Sink
from app.protocol import messages as P

# The commands that hold the model: a reset or an unload is no answer a client waits on.
ANSWERS = (P.CHAT, P.COMPLETE, P.EMBED)
LAST_EVENTS = (P.Done, P.Ok, P.Failed)  # a request ends with one of these


@dataclass
class _Request:
    sink: Sink
    command: str


class InFlight:
    def __init__(self):
        self._requests: dict[int, _Request] = {}

    @property
    def busy(self) -> bool:
        return any(r.command in ANSWERS for r in self._requests.values())

    def __len__(self) -> int:
        return len(self._requests)

    @contextmanager
    def taking(self, request_id: int, command: str, sink: Sink) -> Iterator[None]:
        """Take the request for the block that sends it; whatever the block raises releases it again."""
        self._requests[request_id] = _Request(sink, command)
        try:
            yield
        except BaseException:
            self._requests.pop(request_id, None)
            raise

    def deliver(self, request_id: int | None, event: P.Event) -> bool:
        """Hand an event to its request, releasing the request on its last event; False when no request
        (of those in flight) owns it."""
        request = self._requests.get(request_id) if request_id is not None else None
        if request is None:
            return False
        if isinstance(event, LAST_EVENTS):
            del self._requests[request_id]
        _tell(request.sink, event)
        return True

    def end_all(self, ending: Callable[[int], P.Event]) -> None:
        """The engine is gone: every request is released and told why (ending(request_id) makes its event)."""
        requests, self._requests = self._requests, {}
        for request_id, request in requests.items():
            _tell(request.sink, ending(request_id))


def _tell(sink: Sink, event: P.Event) -> None:
    try:
        sink(event)
    except Exception:  # noqa: BLE001 - the caller's bug must not end the engine's reader thread
        print("hearth: a request's event handler failed:", file=sys.stderr)
        traceback.print_exc()
