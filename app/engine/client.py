"""Start, talk to, and restart the engine process.

The client is Qt-free. A reader thread turns the engine's stdout into events;
by default they queue for blocking callers (the CLI), or they go to an
`on_event` callback (the GUI bridges that to queued Qt signals). When the
process dies, the reader sees end-of-file at once and reports an `error`
event of kind EngineCrashed, naming the exit signal and the engine log.
"""

from __future__ import annotations

import itertools
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from app.core import paths
from app.core.errors import EngineCrashed, GenerationError, HearthError, ModelLoadError, ModelTooBig
from app.engine import protocol as P
from app.engine.spawn import child_command, child_env

KEEP_LOGS = 20
NICE_ENV = "HEARTH_ENGINE_NICE"
ENGINE_NICENESS = 5


def _exit_reason(code: int | None) -> str:
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


def _rotate_logs(folder: Path) -> None:
    logs = sorted(folder.glob("engine-*.log"), key=lambda p: p.stat().st_mtime)
    for old in logs[:-KEEP_LOGS]:
        try:
            old.unlink()
        except OSError:
            pass


class EngineClient:
    def __init__(self, on_event: Callable[[dict], None] | None = None, below_caller: bool = False):
        """below_caller: run the engine at a lower CPU priority than this process. The GUI asks
        for it: llama.cpp keeps every core busy while it generates, and on a small machine the
        window's thread would otherwise wait its turn for tens of milliseconds."""
        self.on_event = on_event
        self.below_caller = below_caller
        self.events: queue.Queue = queue.Queue()
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.loaded: dict | None = None
        self.last_load: P.LoadOptions | None = None
        self._ids = itertools.count(1)
        self._reader: threading.Thread | None = None
        self._write_lock = threading.Lock()
        self._closing = False

    # --- process --------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 60.0) -> None:
        if self.alive:
            return
        self._closing = False
        self.events = queue.Queue()
        folder = paths.log_dir()
        _rotate_logs(folder)
        self.log_path = folder / f"engine-{time.strftime('%Y%m%d-%H%M%S')}-{next(self._ids)}.log"
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(
                child_command("app.engine.host"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, env=child_env({NICE_ENV: str(ENGINE_NICENESS)} if self.below_caller else None),
                bufsize=0,
            )
        finally:
            log.close()
        self._reader = threading.Thread(target=self._read_events, args=(self.proc,), name="engine-reader",
                                        daemon=True)
        self._reader.start()
        ready = self._next_event(timeout, kinds=(P.READY,))
        if ready.get("ev") != P.READY:
            raise EngineCrashed(ready.get("message", "The engine did not start."))

    def _read_events(self, proc: subprocess.Popen) -> None:
        stream = proc.stdout
        for line in stream:
            try:
                event = P.decode(line)
            except ValueError:
                continue
            self._deliver(event)
        # End of file: the process is gone (or going). Give it a moment to report its status.
        try:
            code = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        if self._closing:
            self._deliver({"ev": "exited", "code": code})
            return
        self.loaded = None
        message = f"The engine process stopped unexpectedly: {_exit_reason(code)}."
        if self.log_path:
            message += f" Its log is at {self.log_path}."
        self._deliver({"ev": P.ERROR, "kind": "EngineCrashed", "message": message, "code": code,
                       "log": str(self.log_path) if self.log_path else None})

    def _deliver(self, event: dict) -> None:
        if self.on_event is not None:
            self.on_event(event)
        else:
            self.events.put(event)

    def send(self, message: dict) -> int:
        if not self.alive:
            raise EngineCrashed("The engine is not running.")
        message.setdefault("id", next(self._ids))
        try:
            with self._write_lock:
                self.proc.stdin.write(P.encode(message))
                self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise EngineCrashed("The engine process is gone; it will be restarted.") from None
        return message["id"]

    def close(self, timeout: float = 5.0) -> None:
        """Ask the engine to exit; kill it if it does not."""
        if self.proc is None:
            return
        self._closing = True
        if self.proc.poll() is None:
            try:
                self.send({"cmd": P.SHUTDOWN})
                self.proc.stdin.close()
            except (HearthError, OSError):
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe:
                    pipe.close()
            except OSError:
                pass
        self.proc = None
        self.loaded = None

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()

    def restart(self, timeout: float = 120.0) -> dict | None:
        """Start a fresh engine and reload the last model, if there was one."""
        self.close(timeout=1.0)
        self.start()
        if self.last_load is not None:
            return self.load(self.last_load, timeout=timeout)
        return None

    # --- blocking API (the CLI and tests; the GUI uses on_event) --------
    def _next_event(self, timeout: float | None, kinds=()) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                raise HearthError("The engine did not answer in time.") from None
            if event.get("ev") == P.ERROR or not kinds or event.get("ev") in kinds:
                return event

    @staticmethod
    def _raise(event: dict, default=HearthError):
        kind = event.get("kind")
        cls = {"EngineCrashed": EngineCrashed, "ModelLoadError": ModelLoadError, "ModelTooBig": ModelTooBig,
               "ModelFileError": ModelLoadError, "GenerationError": GenerationError}.get(kind, default)
        raise cls(event.get("message", "The engine reported an error."))

    def load(self, options: P.LoadOptions, timeout: float | None = 300.0) -> dict:
        self.start()
        self.send({"cmd": P.LOAD, "options": options.to_dict()})
        event = self._next_event(timeout, kinds=(P.LOADED,))
        if event.get("ev") == P.ERROR:
            self.loaded = event.get("kept")  # refused before unloading: the previous model is still loaded
            self._raise(event, ModelLoadError)
        self.loaded = event
        self.last_load = options
        return event

    def stream(self, command: dict, timeout: float | None = None) -> Iterator[dict]:
        """Send a chat/complete command and yield its token and stats events, then its done event."""
        self.send(command)
        while True:
            event = self._next_event(timeout)
            kind = event.get("ev")
            if kind == P.ERROR:
                self._raise(event)
            yield event
            if kind == P.DONE:
                return

    def chat(self, messages: list[dict], sampling: P.SamplingOptions, stream_interval_ms: float = 0) -> Iterator[dict]:
        """stream_interval_ms > 0: tokens arrive merged, at most one event per interval (app.engine.coalesce)."""
        return self.stream({"cmd": P.CHAT, "messages": messages, "sampling": sampling.to_dict(),
                            "stream_interval_ms": stream_interval_ms})

    def complete(self, prompt: str, sampling: P.SamplingOptions) -> Iterator[dict]:
        return self.stream({"cmd": P.COMPLETE, "prompt": prompt, "sampling": sampling.to_dict()})

    def cancel(self) -> None:
        if self.alive:
            self.send({"cmd": P.CANCEL})

    def _simple(self, cmd: str, timeout: float = 30.0) -> None:
        self.send({"cmd": cmd})
        event = self._next_event(timeout, kinds=(P.OK,))
        if event.get("ev") == P.ERROR:
            self._raise(event)

    def reset(self) -> None:
        self._simple(P.RESET)

    def unload(self) -> None:
        self._simple(P.UNLOAD)
        self.loaded = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
