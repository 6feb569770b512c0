"""The engine process: reads commands on stdin, writes events on stdout.

The protocol channel is a private duplicate of the original stdout; fd 1 is
pointed at stderr so that anything llama.cpp prints cannot corrupt it.
stderr is the engine log that the client keeps (and shows after a crash).
Cancel is handled by the reader thread at once; everything else runs in
order on the main thread. Every event carries the id of the command it
answers (see app.protocol.messages).
"""

from __future__ import annotations

import faulthandler
import os
import queue
from collections import deque
import sys
import threading
import time
import traceback

from app import __version__
from app.core import env
from app.core.library.bundled import bundled_model_path
from app.core.errors import HearthError, ModelFileError
from app.protocol import commands as C
from app.protocol import messages as P
from app.protocol import step_clock
from app.protocol.coalesce import TokenCoalescer, coalescing
from app.protocol.option_fields import check_options
from app.engine.process.preflight import preflight

_LAST = (P.DONE, P.ERROR)  # a request's final events
ORPHAN_GRACE_S = 5.0  # after stdin closes, the longest an engine takes to exit


# Commands that run beside others, a step at a time: answers (in parallel slots) and embeddings (EmbedJob). Any
# other command (a load, a reset) waits for them.
ALONGSIDE = (*C.ANSWERS, C.Embed)


class Host:
    def __init__(self, out_fd: int):
        self.out_fd = out_fd
        self.write_lock = threading.Lock()
        self.commands: queue.Queue = queue.Queue()
        # One cancel flag per request that can be cancelled, made when its command arrives (so a cancel
        # sent right after is never lost) and dropped when its Done or error goes out.
        self.cancels: dict = {}
        self.cancels_lock = threading.Lock()
        self.running: int | None = None  # the id of the command being carried out (not parallel answers)
        self.session = None  # app.engine.process.session.Session once a model is loaded
        # Embeddings requests under way, (id, EmbedJob, emit): one input of one of them per turn of the loop, in
        # turn, so that a chat request is answered between them and a cancel stops one within an input.
        self.embedding: deque = deque()
        self._held: list[bytes] | None = None  # events kept for one write at the end of a parallel step
        # Taken at the first answer, not at start: the first model loads at full priority while the window
        # that started this engine builds itself (a model ready sooner), and answers yield to the window.
        self.niceness = env.ENGINE_NICE.get()

    def emit(self, event: dict) -> None:
        data = P.encode(event)
        with self.write_lock:
            if self._held is not None:
                self._held.append(data)
            else:
                _write_all(self.out_fd, data)

    def read_commands(self) -> None:
        for line in sys.stdin.buffer:
            if not line.strip():
                continue
            try:
                command = C.read(P.decode(line))
            except ValueError:
                self.emit(P.failed(P.ErrorKind.PROTOCOL, "The engine received a malformed command."))
                continue
            except C.ProtocolError as exc:
                self.emit(P.failed(P.ErrorKind.PROTOCOL, str(exc)))
                continue
            if isinstance(command, C.Cancel):
                self.cancel(command.target)
                continue
            if isinstance(command, (*ALONGSIDE, C.Load)):
                with self.cancels_lock:
                    self.cancels[command.id] = threading.Event()
            self.commands.put(command)
        # stdin closed: whoever started this engine has gone (or wants it gone). Stop the running work and
        # exit; if the main thread is stuck where a cancel cannot reach it, end the process anyway: an
        # engine must never outlive the program that started it.
        self.commands.put(C.Shutdown())
        self.cancel(None)
        watchdog = threading.Timer(ORPHAN_GRACE_S, os._exit, args=(0,))
        watchdog.daemon = True
        watchdog.start()

    def cancel(self, target) -> None:
        """Stop one request, running or waiting its turn (one that waits ends as cancelled when its turn
        comes), or every one (None)."""
        with self.cancels_lock:
            flags = list(self.cancels.values()) if target is None else [self.cancels.get(target)]
        for flag in flags:
            if flag is not None:
                flag.set()

    def cancelled(self, request_id) -> threading.Event:
        with self.cancels_lock:
            return self.cancels.setdefault(request_id, threading.Event())

    def run(self) -> int:
        threading.Thread(target=self.read_commands, name="engine-stdin", daemon=True).start()
        self.emit({"ev": P.READY, "pid": os.getpid(), "version": __version__})
        _import_model_code()
        waiting: deque = deque()
        while True:
            slots = self.running_slots
            answering = slots is not None or bool(self.embedding)
            if not answering and not waiting:
                step_clock.idle()  # waiting for a command is no step: the watchdog must not count it
                waiting.append(self.commands.get())
            while True:  # whatever else has arrived joins the line
                try:
                    waiting.append(self.commands.get_nowait())
                except queue.Empty:
                    break
            if answering and any(isinstance(command, C.Shutdown) for command in waiting):
                if slots is not None:
                    slots.cancel_all()  # nobody is left to read the answers
                self.cancel(None)
            while waiting:
                command = waiting[0]
                slots = self.running_slots
                if slots is not None or self.embedding:
                    # A new answer joins the running ones when a slot is free, an embeddings request the ones
                    # under way; anything else (load, reset, unload) waits for them, in order.
                    if not isinstance(command, ALONGSIDE) or (isinstance(command, C.ANSWERS) and slots is not None
                                                              and not slots.has_free):
                        break
                waiting.popleft()
                if isinstance(command, C.Shutdown):
                    self._unload()
                    return 0
                self.handle(command)
            slots = self.running_slots
            if slots is not None:
                self.step(slots)
            if self.embedding:
                self.embed_step()

    @property
    def running_slots(self):
        """The loaded model's parallel slots while any answers in them; None otherwise."""
        slots = self.session.slots if self.session is not None else None
        return slots if slots is not None and slots.running else None

    def handle(self, command: C.Command) -> None:
        rid = command.id
        self.running = rid
        step_clock.idle()  # a load, or a request's template and tokenizing, are no step; its batches are
        if isinstance(command, ALONGSIDE) and self.cancelled(rid).is_set():  # cancelled while it waited its turn
            self.emit({"ev": P.DONE, "id": rid, "text": "", "finish_reason": "cancelled",
                       "prompt_tokens": 0, "completion_tokens": 0})
            self._forget(rid)
            return
        try:
            self.dispatch(command)
        except HearthError as exc:
            event = P.failed(P.ErrorKind.of(exc), str(exc), rid)
            if isinstance(command, C.Load) and self.session is not None:
                event["kept"] = self.session.describe()  # refused before unloading: this model is still here
            self.emit(event)
            self._forget(rid)
        except Exception as exc:  # a bug: keep the engine alive, log the traceback
            traceback.print_exc()
            self.emit(P.failed(P.ErrorKind.INTERNAL, f"Internal engine error: {exc}", rid))
            self._forget(rid)
        finally:
            self.running = None
            if isinstance(command, C.Load):
                self._forget(rid)

    def step(self, slots) -> None:
        """One shared decode of the parallel answers; a bug fails them all, not the engine.

        The step's events (a token of each answer, their stats) go out in one write: the process reading them
        wakes once per step instead of once per answer. On a machine whose cores all run llama.cpp's threads,
        each of those wake-ups preempts one of them, and the others wait for it at the next barrier."""
        with self.write_lock:
            self._held = []
        try:
            slots.step()
        except Exception as exc:
            traceback.print_exc()
            slots.fail_running(HearthError(f"Internal engine error: {exc}"))
        finally:
            with self.write_lock:
                held, self._held = self._held, None
                if held:
                    _write_all(self.out_fd, b"".join(held))

    def embed_step(self) -> None:
        """One input of the next embeddings request under way: tokenized and checked, or embedded."""
        entry = self.embedding[0]
        self.embedding.rotate(-1)  # the next turn is the next request's
        rid, job, emit = entry
        try:
            if self.cancelled(rid).is_set():  # its client left: the rest is not worth doing
                self.embedding.remove(entry)
                emit({"ev": P.DONE, "embeddings": [], "finish_reason": "cancelled", "prompt_tokens": job.total})
                return
            job.step()
        except HearthError as exc:
            self.embedding.remove(entry)
            emit(P.failed(P.ErrorKind.of(exc), str(exc)))
            return
        except Exception as exc:  # a bug: this request fails, the engine goes on
            traceback.print_exc()
            self.embedding.remove(entry)
            emit(P.failed(P.ErrorKind.INTERNAL, f"Internal engine error: {exc}"))
            return
        finally:
            step_clock.idle()  # between inputs the engine is in no step
        if job.finished:
            self.embedding.remove(entry)
            emit({"ev": P.DONE, **job.result()})

    def _forget(self, request_id) -> None:
        with self.cancels_lock:
            self.cancels.pop(request_id, None)

    def tagged(self, request_id: int | None):
        """An emitter that stamps each event with the request it belongs to."""
        emit = self.emit

        forget = self._forget

        def emit_for_request(event: dict) -> None:
            event["id"] = request_id
            emit(event)
            if event["ev"] in _LAST:
                forget(request_id)

        return emit_for_request

    def dispatch(self, command: C.Command) -> None:
        rid = command.id
        if isinstance(command, C.Load):
            options = command.options
            check_options(options)
            preflight(options)  # before the current model is let go: a refused file costs nothing
            self._unload()
            from app.engine.process.session import Session

            self.session = Session.load(options, probe_model=_probe_model(options),
                                        progress=self._load_progress(rid))
            self.emit({"ev": P.LOADED, "id": rid, **self.session.describe(), "step_s": _measure_step(self.session)})
        elif isinstance(command, C.ANSWERS):
            if self.session is None:
                raise HearthError("No model is loaded.")
            if self.niceness:
                _lower_priority(self.niceness)
                self.niceness = None
            sampling = command.sampling
            check_options(sampling)
            emit = coalescing(self.tagged(rid), command.stream_interval_ms)
            if command.stream_interval_ms > 0:
                # A client that draws (the window) also hears how far a long prompt's reading is (decode.begin's
                # progress events). Others do not: an API stream begins with the prompt's figures.
                emit.prompt_progress = True
            cancelled = self.cancelled(rid)
            try:
                if isinstance(command, C.Chat):
                    result = self.session.chat(command.messages, sampling, emit, cancelled, command.truncate,
                                               tools=command.tools)
                else:
                    result = self.session.complete(command.prompt, sampling, emit, cancelled, command.truncate)
            except Exception:
                if isinstance(emit, TokenCoalescer):  # the tokens generated reach the client before the error
                    emit.flush()
                raise
            if result is not None:  # None: a parallel slot answers from now on, step by step
                emit(result)  # after the last merged tokens
        elif isinstance(command, C.Embed):
            if self.session is None:
                raise HearthError("No model is loaded.")
            self.embedding.append((rid, self.session.embedding(command.inputs), self.tagged(rid)))
        elif isinstance(command, C.Reset):
            if self.session is not None:
                self.session.reset()
            self.emit({"ev": P.OK, "id": rid, "cmd": command.CMD})
        elif isinstance(command, C.Unload):
            self._unload()
            self.emit({"ev": P.OK, "id": rid, "cmd": command.CMD})
        else:  # C.read knows no other; a new command without a branch here is said, not ignored
            raise HearthError(f"The engine does not carry out the command '{command.CMD}'.")

    def _load_progress(self, request_id: int | None):
        """Progress events at most every 0.1 s; a cancel stops the load."""
        last = [0.0]
        cancelled = self.cancelled(request_id)

        def progress(fraction: float) -> bool:
            now = time.monotonic()
            if now - last[0] >= 0.1 or fraction >= 1.0:
                last[0] = now
                self.emit({"ev": P.PROGRESS, "id": request_id, "fraction": round(float(fraction), 3)})
            return not cancelled.is_set()

        return progress

    def _unload(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


WARM_STEPS = 4  # decodes timed after the first, whose time is mostly building the graph


def _measure_step(session) -> float | None:
    """Seconds one token's decode takes on this model here once warm: what the supervisor's watchdog scales a
    step's budget by. The first decode after a load builds the graph and pages the weights in; at 50 times that,
    the budget came out 62.7 s, 103 s, 231 s and 301 s across restarts (issue 56), and --step-timeout could not
    bring it down. So the first is left out and the median of the next few taken. None where it cannot be
    measured."""
    decoder = session.decoder
    if decoder is None or decoder.tokens or session.refusal:
        return None
    try:
        import llama_cpp

        token = llama_cpp.llama_vocab_bos(session.rt.vocab)
        token = token if token >= 0 else 0
        decoder.decode_one(token)  # the cold one
        took = []
        for _ in range(WARM_STEPS):
            started = time.perf_counter()
            decoder.decode_one(token)
            took.append(time.perf_counter() - started)
    except Exception:  # noqa: BLE001 - a model we cannot time gets the budget's floor
        return None
    finally:
        decoder.reset()
    return round(sorted(took)[len(took) // 2], 6)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _import_model_code() -> None:
    """Import llama.cpp and the decode loop (~0.3 s) while the client has not asked for a model yet: a window
    started this engine before building itself, and its first load should not wait for these imports too.
    An import that fails is left for the load to report with its own message."""
    try:
        import app.engine.process.session  # noqa: F401
    except Exception:
        pass


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
    step_clock.attach()  # the supervisor's watchdog reads it (app/protocol/step_clock.py)
    return Host(out_fd).run()


def _lower_priority(niceness: int | None) -> None:
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
