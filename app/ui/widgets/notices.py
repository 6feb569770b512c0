"""What the status bar says: one model of notices (text, severity, cause, lifetime), without Qt.

Every sentence the window shows in its status bar is a Notice posted to one NoticeBoard. The board keeps at
most one notice per cause: a newer notice of the same cause replaces the older one, so a good import's
"Imported x" replaces the failed import's error instead of leaving it up (#49.14), and `clear(cause)` takes a
notice away when what it spoke of is gone (the model it warned about is unloaded). A notice with a lifetime
goes by itself; one without stays until its cause replaces or clears it. The bar shows the newest notice
still alive, so an older notice that stays ("the context policy changed a setting") comes back once a
passing one ("Copied") has gone.

Severity is what the user should do about it, not how the code felt: INFO is news (a normal one-time state
such as a first start's check is news), WARNING is something that works worse than asked, ERROR is something
that did not happen.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable

INFO, WARNING, ERROR = "info", "warning", "error"
SEVERITIES = (INFO, WARNING, ERROR)

# How long a notice stays when its poster gives no lifetime: long enough to read a sentence twice; an error
# longer, since the user may have looked away while the action ran.
DEFAULT_LIFETIME_S = {INFO: 10.0, WARNING: 20.0, ERROR: 30.0}
UNTIL_CLEARED = None  # a lifetime: the notice stays until its cause replaces or clears it

_order = itertools.count()


def cleared(cause: str) -> "Notice":
    """A notice that takes its cause's notice away (posted when what it spoke of went right)."""
    return Notice("", INFO, cause)


@dataclass(frozen=True)
class Notice:
    """text: the sentence as the user reads it; detail: more of it, shown on hover and click (may be "");
    cause: what the notice is about ("models.import", "load"): a newer notice of the same cause replaces it,
    and clearing the cause takes it away ("" for a notice nothing else replaces); lifetime_s: seconds it
    stays, UNTIL_CLEARED for a notice that stays while its cause lasts, or "default" for its severity's."""

    text: str
    severity: str = INFO
    cause: str = ""
    lifetime_s: float | None | str = "default"
    detail: str = ""

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def lifetime(self) -> float | None:
        return DEFAULT_LIFETIME_S[self.severity] if self.lifetime_s == "default" else self.lifetime_s

    @property
    def whole(self) -> str:
        """Everything the notice says: its sentence and its detail."""
        return f"{self.text}\n\n{self.detail}" if self.detail and self.detail != self.text else self.text


@dataclass
class _Posted:
    notice: Notice
    expires: float | None
    order: int = field(default_factory=lambda: next(_order))


class NoticeBoard:
    """The notices alive now. Not thread-safe: the window posts on its GUI thread (other threads reach it
    through a queued signal). `clock` is injectable for tests; listeners are called after every change."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._posted: dict[str, _Posted] = {}  # by cause; a notice without a cause gets a key of its own
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def post(self, notice: Notice) -> None:
        lifetime = notice.lifetime
        expires = None if lifetime is None else self._clock() + max(0.0, lifetime)
        if notice.cause:
            self._posted.pop(notice.cause, None)  # re-inserted as the newest
            key = notice.cause
        else:
            # The same uncaused sentence again is one notice, renewed, not two.
            key = next((k for k, p in self._posted.items() if k.startswith("\0") and p.notice.text == notice.text),
                       f"\0{next(_order)}")
            self._posted.pop(key, None)
        if notice.text:
            self._posted[key] = _Posted(notice, expires)
        self._changed()

    def clear(self, cause: str) -> bool:
        """Take away the notice of this cause (and of causes under it: "models" clears "models.import");
        True when one was up."""
        return self._take([k for k in self._posted if k == cause or k.startswith(cause + ".")])

    def clear_all_passing(self) -> None:
        """Take away every notice that would go by itself (the user dismissed what the bar said)."""
        self._expire()
        self._take([k for k, p in self._posted.items() if p.expires is not None])

    def _take(self, gone: list[str]) -> bool:
        for key in gone:
            del self._posted[key]
        if gone:
            self._changed()
        return bool(gone)

    def current(self) -> Notice | None:
        """The notice the bar shows: the newest still alive."""
        self._expire()
        if not self._posted:
            return None
        return max(self._posted.values(), key=lambda p: p.order).notice

    def alive(self) -> list[Notice]:
        self._expire()
        return [p.notice for p in sorted(self._posted.values(), key=lambda p: p.order)]

    def of(self, cause: str) -> Notice | None:
        self._expire()
        posted = self._posted.get(cause)
        return posted.notice if posted else None

    def next_expiry(self) -> float | None:
        """Seconds until the next notice goes by itself (None when none will)."""
        self._expire()
        times = [p.expires for p in self._posted.values() if p.expires is not None]
        return max(0.0, min(times) - self._clock()) if times else None

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, p in self._posted.items() if p.expires is not None and p.expires <= now]:
            del self._posted[key]

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()
