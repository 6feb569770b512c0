"""The engine process and the pipe to it: start, send a command, hear events, end.

A reader thread turns the child's stdout into typed events (app.protocol.messages)
and hands each to one callback, on that thread. When the process dies the
reader sees end-of-file at once and reports a Failed event of kind
ENGINE_CRASHED naming the exit signal and the engine log; a process that was
asked to end reports Exited instead. What to do about a crash (restart,
reload, fall back) is not decided here but by the supervisor.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Callable

from app.core import env
from app.core import paths
from app.core.errors import EngineCrashed, HearthError, InvalidRequest
from app.core.proc import JsonChild, exit_reason
from app.protocol import commands as C
from app.protocol import messages as P

KEEP_LOGS = 20
NICE_ENV = env.ENGINE_NICE.name
ENGINE_NICENESS = 5
START_TIMEOUT_S = 60.0

_log_numbers = itertools.count(1)


def _rotate_logs(folder: Path) -> None:
    logs = sorted(folder.glob("engine-*.log"), key=lambda p: p.stat().st_mtime)
    for old in logs[:-KEEP_LOGS]:
        try:
            old.unlink()
        except OSError:
            pass


def open_engine_log() -> tuple[Path | None, IO[bytes]]:
    """A new engine log file: in Hearth's log folder, else the temporary folder, else none at all.

    A full or read-only disk must cost the log, not the engine. The name carries this process's id, so
    two programs starting engines in the same second never share one file.
    """
    name = f"engine-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_log_numbers)}.log"
    try:
        folder = paths.log_dir()
        _rotate_logs(folder)
        return folder / name, open(folder / name, "wb")
    except OSError as exc:
        reason = exc.strerror or str(exc)
    try:
        fallback = Path(tempfile.gettempdir()) / f"hearth-{name}"
        log = open(fallback, "wb")
        _say_once(f"hearth: cannot write logs in Hearth's folder ({reason}); the engine log is at {fallback}.")
        return fallback, log
    except OSError:
        _say_once(f"hearth: cannot write logs in Hearth's folder ({reason}) nor in the temporary folder; "
                  "the engine runs without a log.")
        return None, open(os.devnull, "wb")


_said: set[str] = set()


def _say_once(sentence: str) -> None:
    if sentence not in _said:
        _said.add(sentence)
        print(sentence, file=sys.stderr)


class EngineProcess:
    """One engine child process. Not restartable: a supervisor makes a new one."""

    def __init__(self, on_event: Callable[[P.Event], None], below_caller: bool = False):
        """below_caller: run the engine at a lower CPU priority than this process from its first answer
        on. The GUI asks for it: llama.cpp keeps every core busy while it generates, and on a small
        machine the window's thread would otherwise wait its turn for tens of milliseconds."""
        self.on_event = on_event
        self.below_caller = below_caller
        self.child: JsonChild | None = None
        self.log_path: Path | None = None
        self._ready = threading.Event()
        self._closing = False
        self.env: dict[str, str] = {}  # set before start(): the engine runtime's libraries (LLAMA_CPP_LIB_PATH)

    @property
    def alive(self) -> bool:
        return self.child is not None and self.child.alive

    @property
    def pid(self) -> int | None:
        return self.child.proc.pid if self.child else None

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the child and wait until it reads commands; EngineCrashed if it does not."""
        self.log_path, log = open_engine_log()
        with log:  # the child keeps its own handle: its stderr is the log
            self.child = JsonChild("app.engine.process.host", log=log, interactive=True, on_event=self._on_line,
                                   decode=P.decode_event,
                                   env={**self.env, **({NICE_ENV: str(ENGINE_NICENESS)} if self.below_caller else {})})
        if not self._ready.wait(timeout) or not self.alive:
            self.kill()
            raise EngineCrashed(f"The engine did not start. Its log is at {self.log_path}.")

    def _on_line(self, event: P.Event | None) -> None:
        """On the reader thread: each event, then None when the child's stdout ends."""
        if event is None:
            self._ended()
        elif event.KIND == P.READY:
            self._ready.set()
        else:
            self.on_event(event)

    def _ended(self) -> None:
        # End of file: the process is gone (or going). Give it a moment to report its status.
        try:
            code = self.child.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        self._ready.set()  # a start() still waiting learns at once that the child died
        if self._closing:
            self.on_event(P.Exited({"ev": P.EXITED, "code": code}))
            return
        message = f"The engine process stopped unexpectedly: {exit_reason(code)}."
        if self.log_path:
            message += f" Its log is at {self.log_path}."
        self.on_event(P.failed(P.ErrorKind.ENGINE_CRASHED, message, code=code,
                               log=str(self.log_path) if self.log_path else None))

    def send(self, message: dict) -> None:
        if not self.alive:
            raise EngineCrashed("The engine is not running.")
        try:
            data = P.encode(message)
        except (UnicodeEncodeError, TypeError, ValueError) as exc:  # text that is not text (a lone surrogate)
            raise InvalidRequest(f"This request cannot be sent to the engine: {exc}.") from None
        try:
            self.child.send(data)
        except OSError:
            raise EngineCrashed("The engine process is gone; it will be restarted.") from None

    def kill(self) -> None:
        """End the process now (a load cannot be interrupted inside llama.cpp); the reader reports it."""
        if self.alive:
            self.child.cancel()

    def close(self, timeout: float = 5.0) -> None:
        """Ask the engine to exit; kill it if it does not."""
        child = self.child
        if child is None:
            return
        self._closing = True
        if child.alive:
            try:
                self.send(C.Shutdown().wire())
                child.proc.stdin.close()
            except (HearthError, OSError):
                pass
            try:
                child.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        child.close()  # kills it if it is still there, reaps it, joins the reader
