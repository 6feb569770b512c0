"""Incremental detokenization and stop strings.

Tokens carry bytes, not characters: an emoji or a CJK character can be split
across tokens. The incremental UTF-8 decoder holds an incomplete sequence back
until it is whole, so every character is printed once and whole. Stop strings
are held back while the text could still be the start of one, so a partial
stop string is never printed.
"""

from __future__ import annotations

import codecs


class TextStream:
    """Feed token bytes, get printable text; stops at the first stop string."""

    def __init__(self, stop: list[str] | None = None):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = [s for s in (stop or []) if s]
        self._longest = max((len(s) for s in self._stops), default=0)
        self._held = ""  # decoded text not yet emitted (could start a stop string)
        self.text = ""  # everything emitted so far
        self.stopped = False
        self.stop_found: str | None = None  # the stop string that ended the text

    def feed(self, data: bytes) -> str:
        """Return the text that is now safe to print (possibly empty)."""
        if self.stopped:
            return ""
        chunk = self._decoder.decode(data)
        if not chunk:
            return ""
        if not self._stops:
            self.text += chunk
            return chunk
        held = self._held + chunk
        cut = self._find_stop(held)
        if cut is not None:
            self.stopped = True
            cut, self.stop_found = cut
            out = held[:cut]
            self._held = ""
            self.text += out
            return out
        keep = self._partial_stop_suffix(held)
        out = held[: len(held) - keep]
        self._held = held[len(held) - keep :]
        self.text += out
        return out

    def flush(self) -> str:
        """At the end of generation, print whatever was held back."""
        if self.stopped:
            return ""
        rest = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        self.text += rest
        return rest

    def _find_stop(self, held: str) -> tuple[int, str] | None:
        """Where the first stop string in held begins, and which it is."""
        # A stop string may begin in text already emitted only if we had held it back,
        # so searching the held text is enough.
        best = None
        for stop in self._stops:
            i = held.find(stop)
            if i != -1 and (best is None or i < best[0]):
                best = (i, stop)
        return best

    def _partial_stop_suffix(self, held: str) -> int:
        """Length of the longest suffix of held that is a proper prefix of a stop string."""
        for n in range(min(len(held), self._longest - 1), 0, -1):
            tail = held[-n:]
            if any(stop.startswith(tail) for stop in self._stops):
                return n
        return 0
