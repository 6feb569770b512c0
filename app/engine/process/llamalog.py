"""Route llama.cpp's log through Python so that its last errors can explain a failure.

llama.cpp returns NULL from a failed load and says why only in its log; the
engine keeps the last lines to turn into a sentence for the user. Everything
is also written to stderr, which the engine client keeps as the engine log.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import tempfile

import llama_cpp

_LEVEL_ERROR = 4
_recent: collections.deque[str] = collections.deque(maxlen=40)
_installed = None


_WARN, _CONT = 3, 5  # ggml_log_level: a CONT line continues the line before, at its level


@llama_cpp.llama_log_callback
def _on_log(level, text, _user_data):  # pragma: no cover - called from C
    global _last_level
    try:
        if level == _CONT:
            level = _last_level
        _last_level = level
        line = text.decode("utf-8", "replace") if text else ""
        _recent.append(line)
        if level >= _echo_level or _verbose:
            sys.stderr.write(line)
    except Exception:
        pass


_verbose = False
_last_level = 0
_echo_level = _WARN  # the engine's stderr is its log file: warnings belong there


def errors_only() -> None:
    """Where llama.cpp runs in the user's own terminal (the benchmarks), only its errors reach stderr: its
    warnings about a model's vocabulary ("control-looking token ... probably a bug in the model") are noise
    there. They are still kept for explaining a failure."""
    global _echo_level
    _echo_level = _LEVEL_ERROR


def install(verbose: bool = False) -> None:
    global _installed, _verbose
    _verbose = verbose
    if _installed is None:
        llama_cpp.llama_log_set(_on_log, None)
        _installed = _on_log


_mtmd_installed = False


def install_mtmd() -> None:
    """libmtmd (images and sounds) logs through its own setter: its lines join llama.cpp's here."""
    global _mtmd_installed
    if not _mtmd_installed:
        from llama_cpp import mtmd_cpp

        mtmd_cpp.mtmd_log_set(_on_log, None)
        mtmd_cpp.mtmd_helper_log_set(_on_log, None)
        _mtmd_installed = True


def recent_lines() -> list[str]:
    return [line.strip() for line in _recent if line.strip()]


def clear() -> None:
    _recent.clear()


@contextlib.contextmanager
def native_stderr(lines: list[str]):
    """Collect what native code writes straight to fd 2 meanwhile (llama.cpp's grammar parser says why it
    refused a grammar there, not in its log), and pass it on to the real stderr as well."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            data = capture.read()
            os.write(2, data)
            lines += [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
