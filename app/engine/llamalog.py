"""Route llama.cpp's log through Python so that its last errors can explain a failure.

llama.cpp returns NULL from a failed load and says why only in its log; the
engine keeps the last lines to turn into a sentence for the user. Everything
is also written to stderr, which the engine client keeps as the engine log.
"""

from __future__ import annotations

import collections
import sys

import llama_cpp

_LEVEL_ERROR = 4
_recent: collections.deque[str] = collections.deque(maxlen=40)
_installed = None


@llama_cpp.llama_log_callback
def _on_log(level, text, _user_data):  # pragma: no cover - called from C
    try:
        line = text.decode("utf-8", "replace") if text else ""
        _recent.append(line)
        if level >= 3 or _verbose:
            sys.stderr.write(line)
    except Exception:
        pass


_verbose = False


def install(verbose: bool = False) -> None:
    global _installed, _verbose
    _verbose = verbose
    if _installed is None:
        llama_cpp.llama_log_set(_on_log, None)
        _installed = _on_log


def recent_lines() -> list[str]:
    return [line.strip() for line in _recent if line.strip()]


def clear() -> None:
    _recent.clear()
