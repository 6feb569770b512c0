"""Hearth's helper processes: how to start one (from source or from a frozen bundle), and one runner for
"a child that answers in JSON lines" (quantizer, converter, benchmark worker).

A PyInstaller bundle has no `python -m`; there the executable itself takes a hidden flag and runs the same
entry point (app/__main__.py reads ENTRY_POINTS below). The engine's own modules are named here as strings
only, so core imports nothing above it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator

# The key that names an event in every JSON line a helper writes (the engine protocol uses it too).
EVENT = "ev"


@dataclass(frozen=True)
class EntryPoint:
    module: str
    function: str
    takes_args: bool  # called with the remaining arguments, or with none


# Hidden flags of the frozen executable: the one table that both starts children and dispatches them.
ENTRY_POINTS = {
    "--engine-host": EntryPoint("app.engine.process.host", "main", False),
    "--engine-vocab": EntryPoint("app.engine.process.vocab", "main", False),
    "--engine-probe": EntryPoint("app.engine.probes.probe", "child_main", True),
    "--runtime-probe": EntryPoint("app.engine.probes.runtime_probe", "child_main", True),
    "--runtime-build": EntryPoint("app.core.making.runtime_build", "main", True),
    "--quantize-worker": EntryPoint("app.core.making.quantize_worker", "main", True),
    "--convert-worker": EntryPoint("app.core.making.convert_worker", "main", True),
    "--bench-job": EntryPoint("app.bench.job_worker", "main", False),
    "--bench-matrix-worker": EntryPoint("app.bench.matrix_worker", "main", False),
    "--imatrix-worker": EntryPoint("app.engine.quantization.imatrix_worker", "main", True),
    "--projector-check": EntryPoint("app.engine.media.projector_check", "child_main", True),
}
# module -> flag, as child_command needs it.
ENTRY_FLAGS = {entry.module: flag for flag, entry in ENTRY_POINTS.items()}


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def child_command(module: str, *args: str) -> list[str]:
    if is_frozen():
        return [sys.executable, ENTRY_FLAGS[module], *args]
    return [sys.executable, "-m", module, *args]


def hearth_command(*args: str) -> list[str]:
    """The `hearth` command itself (`hearth serve`, `hearth chat`), as this installation runs it."""
    if is_frozen():
        return [sys.executable, *args]
    return [sys.executable, "-m", "app", *args]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if not is_frozen():
        # Make `app` importable in the child even when Hearth runs from a source tree.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


def last_event(output: str, name: str, key: str = "ev") -> dict | None:
    """The last JSON-line event named `name` a finished child printed (a probe's or a check's answer), or None: a
    child that crashed before it answered printed none. Lines that are not JSON (a library's own chatter) are passed."""
    found = None
    for line in output.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get(key) == name:
            found = event
    return found


def exit_reason(code: int | None) -> str:
    """A sentence fragment for how a child ended: 'it was stopped by SIGKILL (killed, ...)'."""
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (killed, possibly for lack of memory)" if name == "SIGKILL" else ""
        return f"it was stopped by {name}{hint}"
    return f"it exited with code {code}"


def _json_object(raw: bytes) -> dict | None:
    event = json.loads(raw)
    return event if isinstance(event, dict) else None


# --- the parent's side ----------------------------------------------------------------------------------------

class JsonChild:
    """A helper process started with child_command whose stdout is JSON lines, one event a line.

    A reader thread decodes the lines, so the parent can keep checking for cancel and time-outs while the
    child is silent. Lines that are not JSON (a library printing) go to the log, if there is one. Use it as a
    context manager: leaving it kills a child that is still running and reaps it.
    """

    def __init__(self, module: str, *args: str, log: IO[bytes] | None = None, stdin: bytes | None = None,
                 env: dict[str, str] | None = None, on_event: Callable[[dict | None], None] | None = None,
                 decode: Callable[[bytes], dict | None] | None = None, interactive: bool = False):
        """stdin: bytes the child reads once (then end of file). interactive: keep stdin open for send().
        on_event: called on the reader thread with each event, and with None when stdout ends, instead of
        queueing them for events(). decode: bytes -> event (or None for a line that is not one)."""
        self.log = log
        self._decode = decode or _json_object
        self.proc = subprocess.Popen(child_command(module, *args),
                                     stdin=subprocess.PIPE if interactive or stdin is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=log if log is not None else subprocess.DEVNULL,
                                     env=child_env(env))
        self._lines: queue.Queue = queue.Queue()
        self._deliver = on_event or self._lines.put
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"{module}-reader", daemon=True)
        self._reader.start()
        if stdin is not None:
            try:
                self.proc.stdin.write(stdin)
                self.proc.stdin.close()
            except OSError:  # it died before reading: its exit code says why
                pass

    def _read(self) -> None:
        deliver, decode = self._deliver, self._decode
        for raw in self.proc.stdout:
            try:
                event = decode(raw)
            except ValueError:
                event = None
            if event is not None:
                deliver(event)
            elif self.log is not None and raw.strip():
                try:
                    self.log.write(raw)
                except (OSError, ValueError):
                    pass
        deliver(None)

    def send(self, data: bytes) -> None:
        """Write to an interactive child's stdin; OSError (BrokenPipeError) when it is gone."""
        with self._write_lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def events(self, on_tick: Callable[[], None] | None = None, tick_s: float = 0.1) -> Iterator[dict]:
        """Each decoded event until the child closes its stdout. on_tick() runs before every wait of at most
        tick_s: it may poll progress, or raise to stop (cancel, time-out); the caller's `with` then kills it."""
        while True:
            if on_tick is not None:
                on_tick()
            try:
                event = self._lines.get(timeout=tick_s)
            except queue.Empty:
                continue
            if event is None:
                return
            yield event

    def run(self, on_event: Callable[[dict], None], on_tick: Callable[[], None] | None = None) -> int:
        """Deliver every event to on_event; returns the exit code."""
        for event in self.events(on_tick):
            on_event(event)
        return self.wait()

    def cancel(self) -> None:
        """Kill the child: the helpers cannot be stopped midway any other way (llama.cpp's quantizer)."""
        if self.proc.poll() is None:
            self.proc.kill()

    def wait(self) -> int:
        return self.proc.wait()

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def close(self) -> int:
        self.cancel()
        code = self.proc.wait()
        self._reader.join(timeout=5)
        self.proc.stdout.close()
        return code

    def __enter__(self) -> JsonChild:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- the child's side ------------------------------------------------------------------------------------------

_events_fd: int | None = None
_events_lock = threading.Lock()


def keep_stdout_for_events() -> None:
    """In a helper, first thing: keep stdout for emit()'s JSON lines only.

    Whatever else writes to stdout (llama.cpp, torch, print) goes to stderr, the parent's log, so that it
    cannot corrupt an event."""
    global _events_fd
    if _events_fd is None:
        _events_fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr


def emit(event: str, **fields) -> None:
    """In a helper: one event line to the parent."""
    line = (json.dumps({EVENT: event, **fields}) + "\n").encode()
    with _events_lock:
        os.write(1 if _events_fd is None else _events_fd, line)
