"""The engine process: reads commands on stdin, writes events on stdout.

The protocol channel is a private duplicate of the original stdout; fd 1 is
pointed at stderr so that anything llama.cpp prints cannot corrupt it.
stderr is the engine log that the client keeps (and shows after a crash).
Cancel is handled by the reader thread at once; everything else runs in
order on the main thread. Every event carries the id of the command it
answers (see app.engine.protocol).
"""

from __future__ import annotations

import faulthandler
import os
import queue
import sys
import threading
import time
import traceback

from app import __version__
from app.core.bundled import bundled_model_path
from app.core.errors import HearthError, ModelFileError
from app.engine import protocol as P
from app.engine.coalesce import TokenCoalescer, coalescing
from app.engine.preflight import preflight


class Host:
    def __init__(self, out_fd: int):
        self.out_fd = out_fd
        self.write_lock = threading.Lock()
        self.commands: queue.Queue = queue.Queue()
        self.cancelled = threading.Event()
        self.running: int | None = None  # the id of the command being carried out
        self.dropped: set = set()  # ids cancelled before their turn
        self.session = None  # app.engine.session.Session once a model is loaded

    def emit(self, event: dict) -> None:
        data = P.encode(event)
        with self.write_lock:
            os.write(self.out_fd, data)

    def read_commands(self) -> None:
        for line in sys.stdin.buffer:
            if not line.strip():
                continue
            try:
                msg = P.decode(line)
            except ValueError:
                self.emit(P.failed(P.ErrorKind.PROTOCOL, "The engine received a malformed command."))
                continue
            cmd = msg.get("cmd")
            if cmd == P.CANCEL:
                # One request runs at a time: a cancel names it, or any (None); a named one still
                # waiting in the queue is dropped when its turn comes.
                target = msg.get("target")
                if target in (None, self.running):
                    self.cancelled.set()
                else:
                    self.dropped.add(target)
                continue
            if cmd in (P.CHAT, P.COMPLETE, P.LOAD):
                # Cleared here, in arrival order, so a cancel sent right after is never lost.
                self.cancelled.clear()
            self.commands.put(msg)
        self.commands.put({"cmd": P.SHUTDOWN})

    def run(self) -> int:
        threading.Thread(target=self.read_commands, name="engine-stdin", daemon=True).start()
        self.emit({"ev": P.READY, "pid": os.getpid(), "version": __version__})
        while True:
            msg = self.commands.get()
            cmd = msg.get("cmd")
            if cmd == P.SHUTDOWN:
                self._unload()
                return 0
            self.running = msg.get("id")
            if self.running in self.dropped:
                self.dropped.discard(self.running)
                self.emit({"ev": P.DONE, "id": self.running, "text": "", "finish_reason": "cancelled",
                           "prompt_tokens": 0, "completion_tokens": 0})
                continue
            try:
                self.dispatch(cmd, msg)
            except HearthError as exc:
                event = P.failed(P.ErrorKind.of(exc), str(exc), msg.get("id"))
                if cmd == P.LOAD and self.session is not None:
                    event["kept"] = self.session.describe()  # refused before unloading: this model is still here
                self.emit(event)
            except Exception as exc:  # a bug: keep the engine alive, log the traceback
                traceback.print_exc()
                self.emit(P.failed(P.ErrorKind.INTERNAL, f"Internal engine error: {exc}", msg.get("id")))
            finally:
                self.running = None

    def tagged(self, request_id: int | None):
        """An emitter that stamps each event with the request it belongs to."""
        emit = self.emit

        def emit_for_request(event: dict) -> None:
            event["id"] = request_id
            emit(event)

        return emit_for_request

    def dispatch(self, cmd: str, msg: dict) -> None:
        rid = msg.get("id")
        if cmd == P.LOAD:
            options = P.LoadOptions.from_dict(msg.get("options"))
            preflight(options)  # before the current model is let go: a refused file costs nothing
            self._unload()
            from app.engine.session import Session

            self.session = Session.load(options, probe_model=_probe_model(options),
                                        progress=self._load_progress(rid))
            self.emit({"ev": P.LOADED, "id": rid, **self.session.describe()})
        elif cmd in (P.CHAT, P.COMPLETE):
            if self.session is None:
                raise HearthError("No model is loaded.")
            sampling = P.SamplingOptions.from_dict(msg.get("sampling"))
            emit = coalescing(self.tagged(rid), float(msg.get("stream_interval_ms") or 0))
            try:
                truncate = msg.get("truncate", True)
                if cmd == P.CHAT:
                    result = self.session.chat(msg.get("messages") or [], sampling, emit, self.cancelled, truncate,
                                               tools=msg.get("tools"))
                else:
                    result = self.session.complete(msg.get("prompt") or "", sampling, emit, self.cancelled,
                                                   truncate)
            except Exception:
                if isinstance(emit, TokenCoalescer):  # the tokens generated reach the client before the error
                    emit.flush()
                raise
            emit(result)  # after the last merged tokens
        elif cmd == P.EMBED:
            if self.session is None:
                raise HearthError("No model is loaded.")
            self.emit({"ev": P.DONE, "id": rid, **self.session.embed(msg.get("inputs") or [])})
        elif cmd == P.RESET:
            if self.session is not None:
                self.session.reset()
            self.emit({"ev": P.OK, "id": rid, "cmd": cmd})
        elif cmd == P.UNLOAD:
            self._unload()
            self.emit({"ev": P.OK, "id": rid, "cmd": cmd})
        else:
            raise HearthError(f"The engine does not know the command '{cmd}'.")

    def _load_progress(self, request_id: int | None):
        """Progress events at most every 0.1 s; a cancel stops the load."""
        last = [0.0]

        def progress(fraction: float) -> bool:
            now = time.monotonic()
            if now - last[0] >= 0.1 or fraction >= 1.0:
                last[0] = now
                self.emit({"ev": P.PROGRESS, "id": request_id, "fraction": round(float(fraction), 3)})
            return not self.cancelled.is_set()

        return progress

    def _unload(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def _probe_model(options: P.LoadOptions) -> str:
    # The bundled model is quantized, which is what the faulty kernels need to show up.
    try:
        return str(bundled_model_path())
    except ModelFileError:
        return options.model_path


def main() -> int:
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable(file=sys.stderr)
    _lower_priority(os.environ.get("HEARTH_ENGINE_NICE"))
    return Host(out_fd).run()


def _lower_priority(niceness: str | None) -> None:
    """Yield the CPU to the GUI when asked to (see EngineClient.below_caller)."""
    if not niceness:
        return
    try:
        if hasattr(os, "nice"):
            os.nice(int(niceness))
        else:  # Windows
            import psutil

            psutil.Process().nice(psutil.BELOW_NORMAL_PRIORITY_CLASS)
    except (OSError, ValueError, AttributeError):
        pass  # a priority we cannot set costs smoothness, not correctness


if __name__ == "__main__":
    sys.exit(main())
