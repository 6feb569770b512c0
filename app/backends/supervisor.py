"""The local engine as a backend: one engine process kept alive with the model the user chose.

Qt-free, so the window, the CLI, the API server and the benchmarks get the same
recovery. It starts the engine process (app.backends.transport), sends commands
with request ids, routes each event to the request it belongs to, and owns the
state machine that used to live in the window:

- a load that fails loses nothing: a model refused before unloading (the fit
  check, app.engine.process.preflight) leaves the old one loaded; a file llama.cpp
  refuses brings the last good model back;
- a cancelled load ends the process (llama.cpp cannot be interrupted inside a
  load) and starts a fresh one with the last good model;
- a crash costs the running requests an error and one restart with the model
  (the last good one if the crash came while loading another); more than
  MAX_CRASHES within CRASH_WINDOW_S and it restarts without a model, so a
  model that crashes on every load cannot keep the machine busy;
- an engine stopped by SIGTERM, SIGINT or SIGHUP did not crash: most often the
  whole process group is being stopped (Ctrl-C in a terminal, a service
  manager's SIGTERM), this process with it. It restarts only if this process
  is still running STOP_GRACE_S later and has not closed it (it once started a
  second engine while `hearth serve` shut down); stop_restarting() says at once
  that no engine is to start again;
- a step that never ends (a grammar too ambiguous for llama.cpp spends minutes on one token) is ended by the
  WATCHDOG: the engine marks when each step (a token, sampling included, or a prompt batch) began in a
  shared mapping (app/protocol/step_clock.py: no message per token), a thread here reads it, and a step past
  its budget (STEP_FACTOR times the one-token time measured at load, per token of the step, and at least
  STEP_FLOOR_S or the load's step_timeout_s) ends the process. The requests in flight are told why, the
  engine restarts with the same model (not counted as a crash: the model is not at fault), and stats()
  says "stalled" meanwhile.

Threads: events arrive on the transport's reader thread and starts run on a
short-lived worker thread; a lock keeps the state consistent, and listeners and
request sinks are called on those threads (the window's adapter turns them into
queued Qt signals). Listeners must not block.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from app.core import env
from app.core.errors import EngineBusy, EngineCrashed, HearthError
from app.protocol import commands as C
from app.protocol import messages as P
from app.backends.backend import BackendListener, EngineState, Sink, StateNews
from app.backends.in_flight import LAST_EVENTS, InFlight
from app.backends.transport import EngineProcess
from app.protocol import step_clock

MAX_CRASHES = 3  # within CRASH_WINDOW_S; then the engine restarts without a model
CRASH_WINDOW_S = 60.0
# An engine ended by one of these was told to stop, by someone stopping this process too most often.
STOP_SIGNALS = (-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP)
STOP_GRACE_S = 3.0
# The watchdog: a step's budget is STEP_FACTOR times its tokens' decode time measured at load, at least
# STEP_FLOOR_S (LoadOptions.step_timeout_s, or HEARTH_STEP_TIMEOUT in the environment, replaces the floor).
STEP_FACTOR = 50.0
STEP_FLOOR_S = 10.0
STEP_TIMEOUT_ENV = env.STEP_TIMEOUT.name
WATCH_INTERVAL_S = 0.25

Transport = Callable[[Callable[[P.Event], None], bool], EngineProcess]


class Supervisor(StateNews):
    """The local engine behind the Backend seam (app.backends.backend)."""

    name = "local"

    @classmethod
    def for_window(cls) -> "Supervisor":
        """A window's engine, its process starting now: `hearth gui` makes it before it imports Qt and builds
        the window, so the engine's start and the model's load overlap with those. below_caller: the engine
        yields the CPU to the window's thread while it answers (see EngineProcess)."""
        engine = cls(below_caller=True)
        engine.start()
        return engine

    def __init__(self, below_caller: bool = False, transport: Transport = EngineProcess):
        """transport(on_event, below_caller) makes a process; tests pass a fake one."""
        self.below_caller = below_caller
        self._make_transport = transport
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._generation = 0  # which process the events come from; older ones are ignored
        self.process: EngineProcess | None = None
        self.listeners: list[BackendListener] = []
        self.options: P.LoadOptions | None = None  # the model to keep loaded (reloaded after a crash)
        self.info: dict | None = None  # the loaded model's description (a Loaded event)
        self.loading = False
        self.last_good: P.LoadOptions | None = None
        self.failed_options: P.LoadOptions | None = None  # the last load that failed, and why
        self.load_error_kind: P.ErrorKind | None = None
        self.load_error: str | None = None  # its sentence, until a load succeeds
        self._load_id: int | None = None
        self._requests = InFlight()  # the busy slot's one owner: taken at submit, released by its last event
        # The engine runtime of the running process (app/backends/runtime_choice.py), what it was chosen for,
        # and the CPU runtime to fall back to after a GPU runtime crashed on a load.
        self.runtime = None
        self._runtime_asked: str | None = None
        self._fallback = None
        self._crash_times: list[float] = []
        self._worker: threading.Thread | None = None
        self._starting = False
        self._cancelling_load = False
        self._restarting = False
        self._no_restart = False  # this process is shutting down (stop_restarting)
        self.closed = False
        self._clock: step_clock.StepClock | None = None  # the running engine's step clock
        self._watchdog: threading.Thread | None = None
        self._stalled: str | None = None  # the watchdog's sentence, from when it ends an engine to its restart

    # --- the Backend seam ------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def log_path(self) -> Path | None:
        return self.process.log_path if self.process else None

    @property
    def ready(self) -> bool:
        return self.info is not None and not self.loading and self.alive

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._requests.busy

    @property
    def state(self) -> EngineState:
        """What the engine is doing, in one word (app/backends/backend.py): derived from what the supervisor
        holds, under its lock, so no client reads those fields to guess it."""
        with self._lock:
            if self.closed:
                return EngineState.STOPPED
            if self._stalled:  # the watchdog is ending the engine
                return EngineState.STALLED
            if self._restarting and not self._no_restart:
                return EngineState.RESTARTING
            if self._starting or (self.loading and not self.alive):  # a load starts the engine first
                return EngineState.STARTING
            if not self.alive:
                return EngineState.STOPPED
            if self.loading:
                return EngineState.LOADING
            if self.info is None:  # a model wanted but not loaded: its load failed, and nothing tries again
                return EngineState.FAILED if self.options is not None else EngineState.EMPTY
            if self.stalled:
                return EngineState.STALLED
            return EngineState.BUSY if self._requests.busy else EngineState.READY

    def stats(self) -> dict:
        """What a status line or /health reports."""
        with self._lock:
            return {"backend": self.name, "ready": self.ready, "loading": self.loading, "busy": self.busy,
                    "model": dict(self.info) if self.info else None, "pid": self.pid,
                    "log": str(self.log_path) if self.log_path else None, "stalled": self.stalled,
                    "state": self.state.value}

    @property
    def stalled(self) -> str | None:
        """Why the engine is not answering although a model is loaded: a step past its budget (the watchdog
        is ending it, or has and the engine restarts), or one past half of it; None when it is not."""
        with self._lock:
            if self._stalled:
                return self._stalled
            running = self._step_running()
            if running is not None:
                took, units = running
                budget = self.step_budget(units)
                if took > budget / 2:
                    return f"One engine step has run for {took:.0f} s (its budget is {budget:.0f} s)."
            return None

    def models(self) -> list[dict]:
        """The models this backend can load: the library's, the loaded one marked."""
        from app.core.library import list_models

        loaded = self.info.get("path") if self.info else None
        return [{"id": m.id, "name": m.name, "path": m.path, "quantization": m.quantization, "loaded": m.path == loaded}
                for m in list_models()]

    def start(self) -> None:
        """Start the engine process now, without a model; never blocks. A window calls this before it builds
        itself, so the process's start and imports overlap with that and the first load finds it up."""
        with self._lock:
            if not self.alive and not self.closed:
                self._run_worker()

    def load(self, options: P.LoadOptions) -> None:
        """Load a model, starting the engine first if needed; never blocks. Listeners hear how it went."""
        with self._lock:
            self.options = options
            self.loading = True
            self.info = None
            self._tell(lambda listener: listener.model_loading(options))
            if self.alive and not self._starting and self._other_runtime(options.runtime):
                self._replace_process()  # another runtime's libraries: only a new process can load them
            elif self.alive and not self._starting:
                self._send_load(options)
            else:
                self._run_worker()

    def cancel_load(self) -> None:
        """End the engine mid-load; it comes back with the model loaded before, if there was one."""
        with self._lock:
            if not self.loading:
                return
            self.options = self.last_good if self.last_good is not self.options else None
            self.loading = False
            self._cancelling_load = True
            if self.process is not None:
                self.process.kill()

    def chat(self, messages: list[dict], sampling: P.SamplingOptions, sink: Sink,
             stream_interval_ms: float = 0, truncate: bool = True, tools: list[dict] | None = None) -> int:
        """Start an answer; its Token/Stats events and then one Done or Failed go to sink.

        truncate=False: a conversation longer than the context fails (ContextTooLong) instead of being
        cut by the context policy. tools: OpenAI's function descriptions, rendered into the prompt."""
        return self.submit(C.Chat(messages=messages, sampling=sampling, stream_interval_ms=stream_interval_ms,
                                  truncate=truncate, tools=tools or None), sink)

    def embed(self, inputs: list, sink: Sink) -> int:
        """Embed texts (or token lists); one Done with "embeddings", "prompt_tokens" and "n_embd" goes to sink."""
        return self.submit(C.Embed(inputs=inputs), sink)

    def complete(self, prompt: str, sampling: P.SamplingOptions, sink: Sink, stream_interval_ms: float = 0,
                 truncate: bool = True) -> int:
        return self.submit(C.Complete(prompt=prompt, sampling=sampling, stream_interval_ms=stream_interval_ms,
                                      truncate=truncate), sink)

    def submit(self, command: C.Command, sink: Sink) -> int:
        """Send a command; its events go to sink until one ends it (Done, Ok or Failed).

        A command that cannot start (no engine, a model still loading) raises its HearthError here."""
        with self._lock:
            if self.loading or self._starting:
                raise EngineBusy("The model is still loading; try again in a moment.")
            rid = next(self._ids)
            with self._requests.taking(rid, command.CMD, sink):  # released if it cannot be sent
                self._send(command.with_id(rid))
            self._state_news()
        return rid

    def cancel(self, request_id: int | None = None) -> None:
        """Stop one answer (or whichever runs); the engine stops within a token and reports Done."""
        with self._lock:
            if self.alive:
                try:
                    self._send(C.Cancel(target=request_id))
                except HearthError:
                    pass

    def reset(self, sink: Sink | None = None) -> int:
        """Forget the KV cache (the engine keeps it for the next turn of the same chat)."""
        return self.submit(C.Reset(), sink or (lambda event: None))

    def unload(self, sink: Sink | None = None) -> int:
        """Let go of the model; the engine stays up, and nothing is reloaded after a crash."""
        with self._lock:
            rid = self.submit(C.Unload(), sink or (lambda event: None))
            self.options = self.info = None
            return rid

    def stop_restarting(self) -> None:
        """This process is shutting down: an engine that stops from now on is not started again (requests
        already running go on; close() ends the engine)."""
        with self._lock:
            self._no_restart = True

    def close(self, timeout: float = 3.0) -> None:
        with self._lock:
            self.closed = True
            worker = self._worker
            clock, self._clock = self._clock, None
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=30)
        with self._lock:
            process, self.process = self.process, None
            self.info = None
        if process is not None:
            process.close(timeout=timeout)
        if clock is not None:
            clock.close()
        watchdog = self._watchdog
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(timeout=2 * WATCH_INTERVAL_S + 1)  # it sees `closed` within one interval; none outlives us

    # --- starting --------------------------------------------------------
    def _run_worker(self) -> None:
        if self._starting:
            return  # the start in progress loads self.options when it is up
        self._starting = True
        self._worker = threading.Thread(target=self._start, name="engine-start", daemon=True)
        self._worker.start()

    def _other_runtime(self, asked: str) -> bool:
        """Whether a load asking for `asked` needs other libraries than the running process has."""
        if self._runtime_asked is None or asked == self._runtime_asked:
            return False
        return not (asked == "cpu" and self.runtime is not None and self.runtime.name == "cpu")

    def _replace_process(self) -> None:
        old, self.process = self.process, None
        self._generation += 1  # what the old process still says is not news
        if old is not None:
            threading.Thread(target=old.close, args=(1.0,), name="engine-reap", daemon=True).start()
        self._run_worker()

    def _choose_runtime(self):
        from app.backends import runtime_choice

        asked = self.options.runtime if self.options is not None else "auto"
        try:
            return asked, (self._fallback or runtime_choice.choose(asked))
        except Exception as exc:  # noqa: BLE001 - choosing must never stop the engine from starting
            return asked, runtime_choice.Chosen(runtime_choice.runtimes.cpu_runtime(), None,
                                                f"Choosing an engine runtime failed ({exc}); the model runs on the CPU.")

    def _start(self) -> None:
        asked, chosen = self._choose_runtime()  # may probe a runtime (a child process): outside the lock
        with self._lock:
            if self.closed:
                self._starting = False
                return
            self._generation += 1
            generation = self._generation
            process = self._make_transport(lambda event: self._on_event(generation, event), self.below_caller)
            clock = self._new_clock()
            if hasattr(process, "env"):
                process.env = {**chosen.env(), **({step_clock.ENV: clock.path} if clock is not None else {})}
            self.runtime, self._runtime_asked = chosen, asked
            self.process = process
        try:
            process.start()
        except Exception as exc:  # whatever stops a start is reported: a client must never wait for nothing
            message = str(exc) if isinstance(exc, HearthError) else f"The engine could not start: {exc}."
            with self._lock:
                self._generation += 1  # what the dead process's reader still reports is not news
                self._starting = False
                self._stalled = None
                self.loading = False
                failure = P.failed(P.ErrorKind.ENGINE_CRASHED, message)
                self._tell(lambda listener: listener.load_failed(failure))
            return
        with self._lock:
            self._starting = False
            self._stalled = None  # a new process: the stuck step is gone with the old one
            restarted, self._restarting = self._restarting, False
            self._tell(lambda listener: listener.engine_started())
            if restarted:
                self._tell(lambda listener: listener.engine_restarted())
            if self.closed:
                return
            # Load what is wanted now: a load asked for while the process started replaced options.
            if self.loading and self.options is not None:
                self._send_load(self.options)

    # --- the watchdog ------------------------------------------------------
    def _new_clock(self) -> step_clock.StepClock | None:
        """A fresh step clock for the process being started (the last one's marks are not this one's)."""
        old, self._clock = self._clock, None
        if old is not None:
            old.close()
        try:
            self._clock = step_clock.StepClock()
        except (OSError, ValueError):
            return None  # no shared memory here: the engine runs without a watchdog
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name="engine-watchdog", daemon=True)
            self._watchdog.start()
        return self._clock

    def step_budget(self, units: float = 1.0) -> float:
        """Seconds one step of `units` tokens may take before the watchdog ends the engine."""
        given = env.STEP_TIMEOUT.get() or (self.options.step_timeout_s if self.options is not None else None)
        step_s = (self.info or {}).get("step_s") or 0.0
        measured = STEP_FACTOR * step_s * max(1.0, units)
        if given:
            # The user's budget is a token's, as given (#56 B5: it only raised a floor under a budget measured in
            # minutes); a prompt batch of many tokens keeps at least its measured share of time, or a long prompt
            # could never be read under a short token budget.
            return given if units <= 1 else max(given, measured)
        return max(STEP_FLOOR_S, measured)

    def _step_running(self) -> tuple[float, float] | None:
        """(seconds, tokens) of the step the loaded model's engine is in, if it is in one."""
        clock = self._clock
        if clock is None or self.loading or self._starting or not self.alive or self.info is None:
            return None
        return clock.running_for()

    def _watch(self) -> None:
        """The watchdog's thread: end an engine whose step has run past its budget."""
        while not self.closed:
            time.sleep(WATCH_INTERVAL_S)
            with self._lock:
                if self.closed or self._stalled:
                    continue
                running = self._step_running()
                if running is None:
                    continue
                took, units = running
                budget = self.step_budget(units)
                if took <= budget:
                    continue
                what = "one token" if units <= 1 else f"one prompt batch of {units:.0f} tokens"
                self._stalled = (f"Hearth's watchdog stopped the engine: {what} took more than {budget:g} s (the "
                                 "step budget; --step-timeout sets it), which happens when llama.cpp is stuck, "
                                 "for example on a grammar or pattern too ambiguous to enforce. The engine "
                                 "restarts with the model.")
                if self.process is not None:
                    self.process.kill()  # the reader reports the end; _on_crash answers and restarts

    def _send_load(self, options: P.LoadOptions) -> None:
        self._load_id = next(self._ids)
        try:
            self._send(C.Load(id=self._load_id, options=options))
        except HearthError:
            pass  # the reader reports the dead process as a crash, which restarts and reloads

    def _send(self, command: C.Command) -> None:
        if self.process is None:
            raise EngineCrashed("The engine is not running.")
        self.process.send(command.wire())

    # --- events (reader thread) -----------------------------------------
    def _on_event(self, generation: int, event: P.Event) -> None:
        with self._lock:
            if generation != self._generation or self.closed:
                return  # from a process being replaced (a cancelled load that finished as it was killed)
            if self._starting and isinstance(event, P.Failed):
                return  # the start in progress reports its own failure
            rid = event.request_id
            if self._requests.deliver(rid, event):
                if isinstance(event, LAST_EVENTS):
                    self._state_news()
                return
            if rid is not None and rid == self._load_id:
                self._on_load_event(event)
            elif isinstance(event, P.Failed) and event.kind is P.ErrorKind.ENGINE_CRASHED:
                self._on_crash(event)
            elif isinstance(event, P.Failed):
                # An error no request owns (a malformed command).
                self._tell(lambda listener: listener.engine_error(event))

    def _on_load_event(self, event: P.Event) -> None:
        if isinstance(event, P.Progress):
            if self.loading:
                self._tell(lambda listener: listener.load_progress(event.fraction))
        elif isinstance(event, P.Loaded):
            self._load_id = None
            self.loading = False
            if self.runtime is not None:  # which libraries, which devices, and why if not the ones asked for
                event["runtime"] = self.runtime.describe()
            self.info = event
            self.load_error = None
            self.last_good = self.options
            self._tell(lambda listener: listener.model_loaded(event))
        elif isinstance(event, P.Failed):
            self._load_id = None
            self._on_load_error(event)

    def _on_load_error(self, event: P.Failed) -> None:
        """A refused load loses nothing: the engine kept its model, or the last good one is loaded again."""
        self.loading = False
        self.failed_options, self.load_error_kind, self.load_error = self.options, event.kind, event.message
        last = self.last_good
        if event.kept:  # refused before unloading (app/engine/process/preflight.py)
            self.info, self.options = P.Loaded(event.kept), last
            self._tell(lambda listener: listener.load_failed(event))
        elif last is not None and self.options is not last:
            again = P.failed(event.kind, f"{event.message} Loading {Path(last.model_path).name} again.",
                             event.request_id)
            self._tell(lambda listener: listener.load_failed(again))
            self.load(last)
        else:
            self._tell(lambda listener: listener.load_failed(event))

    def _on_crash(self, event: P.Failed) -> None:
        if self._stalled:
            self._on_watchdog_kill(event)
            return
        was_loading = self.loading
        self.info = None
        # every running request ends with the crash
        self._requests.end_all(lambda rid: P.failed(P.ErrorKind.ENGINE_CRASHED, event.message, rid,
                                                    log=event.get("log")))
        deliberate, self._cancelling_load = self._cancelling_load, False
        stopped = not deliberate and event.get("code") in STOP_SIGNALS  # told to stop, not crashed
        self._restarting = True
        if self.process is not None:
            old = self.process
            threading.Thread(target=old.close, args=(1.0,), name="engine-reap", daemon=True).start()
        note = ""
        if not deliberate and was_loading and self.runtime is not None and self.runtime.name != "cpu":
            note = self._fall_back_to_cpu(event)
        if not deliberate and not stopped:
            now = time.monotonic()
            self._crash_times = [t for t in self._crash_times if now - t < CRASH_WINDOW_S] + [now]
            if was_loading and not note:
                # The model being loaded may be what crashes; go back to the last one that worked.
                self.options = self.last_good if self.options is not self.last_good else None
        if len(self._crash_times) > MAX_CRASHES:
            self.options = None  # crashing in a loop: keep an empty engine and let the user choose
        if not deliberate:
            then = " and reloads the model." if self.options else " without a model."
            if stopped:
                then = f" in {STOP_GRACE_S:g} s if it is still running{then[:-1]} then."
            crashed = P.failed(P.ErrorKind.ENGINE_CRASHED, event.message + note + " Hearth restarts it" + then,
                               log=event.get("log"))
            self._tell(lambda listener: listener.engine_crashed(crashed))
            if was_loading:
                self._tell(lambda listener: listener.load_failed(event))
        self.loading = self.options is not None
        if self._no_restart:
            self.loading = False
            return
        if self.loading:
            options = self.options
            self._tell(lambda listener: listener.model_loading(options))
        if stopped:
            timer = threading.Timer(STOP_GRACE_S, self._restart_after_stop, args=(self._generation,))
            timer.daemon = True
            timer.start()
            return
        self._run_worker()

    def _on_watchdog_kill(self, event: P.Failed) -> None:
        """The watchdog ended the engine: the requests hear why, and it restarts with the same model. Not a
        crash of the model's (a request's grammar, most often), so it does not count towards MAX_CRASHES."""
        stalled = self._stalled
        self.info = None
        # beside: how many other requests the engine was running. A plain answer without a grammar that ran beside
        # others is sent again by the API server (app/server/answers.py); one that ran alone was what stalled.
        beside = max(len(self._requests) - 1, 0)
        self._requests.end_all(lambda rid: P.failed(P.ErrorKind.ENGINE_CRASHED, stalled, rid, log=event.get("log"),
                                                    beside=beside))
        self._cancelling_load = False
        self._restarting = True
        if self.process is not None:
            old = self.process
            threading.Thread(target=old.close, args=(1.0,), name="engine-reap", daemon=True).start()
        self._tell(lambda listener: listener.engine_crashed(P.failed(P.ErrorKind.ENGINE_CRASHED, stalled,
                                                                     log=event.get("log"))))
        self.loading = self.options is not None and not self._no_restart
        if self._no_restart:
            self._stalled = None
            return
        if self.loading:
            options = self.options
            self._tell(lambda listener: listener.model_loading(options))
        self._run_worker()

    def _restart_after_stop(self, generation: int) -> None:
        """STOP_GRACE_S after a signal stopped the engine: this process is still here, so restart it, unless
        it closed, is shutting down, or started an engine meanwhile (a load asked for one)."""
        with self._lock:
            if self.closed or self._no_restart or generation != self._generation or self.alive or self._starting:
                return
            self._run_worker()

    def _fall_back_to_cpu(self, event: P.Failed) -> str:
        """A GPU runtime that crashed on a load: remembered as broken on this machine, the load tried again on
        the CPU runtime. Returns the sentence that says so."""
        from app.backends import runtime_choice

        runtime = self.runtime.runtime
        note = (f" The {runtime.backend} runtime crashed loading the model, so Hearth uses the CPU runtime "
                "from now on (hearth runtimes list shows why; --runtime names it to try again).")
        runtime_choice.remember_failure(runtime, event.message)
        self._fallback = runtime_choice.Chosen(runtime_choice.runtimes.cpu_runtime(), None, note.strip())
        return note
