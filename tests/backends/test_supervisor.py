"""The supervisor's state machine, with a fake engine process that plays scripted events.

A fake is right here: these tests are about what the supervisor decides when a
process crashes, refuses or is killed at a given moment, which a real llama.cpp
process cannot be made to do on cue. The real process is covered in
test_engine_process.py and the window's load tests.
"""

from __future__ import annotations

import queue
import threading

import pytest

from app.core.errors import EngineBusy, EngineCrashed
from app.protocol import messages as P
from app.backends.backend import BackendListener, EngineState as S
from app.backends.supervisor import MAX_CRASHES, Supervisor

TIMEOUT_S = 5.0
GOOD = P.LoadOptions(model_path="/models/good.gguf")
OTHER = P.LoadOptions(model_path="/models/other.gguf")
BAD = P.LoadOptions(model_path="/models/bad.gguf")
SAMPLING = P.SamplingOptions(max_tokens=3)


class FakeProcess:
    """Plays the engine host's side: answers commands on its own 'reader' thread, in order."""

    def __init__(self, engine: "FakeEngine", on_event, below_caller: bool):
        self.engine, self.on_event = engine, on_event
        self.alive = False
        self.pid = 1000 + len(engine.processes)
        self.log_path = None
        self.sent: list[dict] = []
        self._out: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._play, daemon=True)

    def start(self, timeout: float = 60.0) -> None:
        if self.engine.fail_starts:
            self.engine.fail_starts -= 1
            raise EngineCrashed("The engine did not start.")
        self.alive = True
        self._reader.start()

    def send(self, message: dict) -> None:
        if not self.alive:
            raise EngineCrashed("The engine is not running.")
        self.sent.append(message)
        self.engine.commands.append(message)
        if message["cmd"] == P.CANCEL:
            return
        for event in self.engine.script(self, message):
            self._out.put(event)

    def crash(self) -> None:
        self._out.put("crash")

    def kill(self) -> None:
        self.crash()

    def close(self, timeout: float = 5.0) -> None:
        if self.alive:
            self._out.put("exit")

    def _play(self) -> None:
        while True:
            event = self._out.get()
            if event == "crash":
                self.alive = False
                self.on_event(P.failed(P.ErrorKind.ENGINE_CRASHED, "The engine process stopped unexpectedly: "
                                       "it was stopped by SIGSEGV."))
                return
            if event == "exit":
                self.alive = False
                self.on_event(P.Exited({"ev": P.EXITED, "code": 0}))
                return
            self.on_event(event)


class FakeEngine:
    """What every fake process does with a command; tests change the rules."""

    def __init__(self):
        self.processes: list[FakeProcess] = []
        self.commands: list[dict] = []
        self.fail_starts = 0
        self.crash_on_load: set[str] = set()
        self.refuse: dict[str, tuple[P.ErrorKind, bool]] = {}  # path -> (kind, refused before unloading)
        self.hang_on_load: set[str] = set()
        self.crash_mid_answer = False
        self.crash_after_load = False
        self.loaded: str | None = None

    def transport(self, on_event, below_caller):
        process = FakeProcess(self, on_event, below_caller)
        self.processes.append(process)
        self.loaded = None
        return process

    def script(self, process: FakeProcess, message: dict) -> list:
        rid = message.get("id")
        if message["cmd"] == P.LOAD:
            path = message["options"]["model_path"]
            if path in self.hang_on_load:
                return [P.Progress({"ev": P.PROGRESS, "id": rid, "fraction": 0.1})]
            if path in self.crash_on_load:
                return ["crash"]
            if path in self.refuse:
                kind, before_unloading = self.refuse[path]
                kept = {"path": self.loaded, "model": self.loaded} if before_unloading and self.loaded else None
                if not before_unloading:
                    self.loaded = None
                return [P.failed(kind, f"{path} was refused.", rid, **({"kept": kept} if kept else {}))]
            self.loaded = path
            return [P.Progress({"ev": P.PROGRESS, "id": rid, "fraction": 1.0}),
                    P.Loaded({"ev": P.LOADED, "id": rid, "path": path, "model": path.rsplit("/", 1)[-1]}),
                    *(["crash"] if self.crash_after_load else [])]
        if message["cmd"] == P.CHAT:
            tokens = [P.Token({"ev": P.TOKEN, "id": rid, "text": t}) for t in ("a", "b")]
            if self.crash_mid_answer:
                return [*tokens, "crash"]
            return [*tokens, P.Done({"ev": P.DONE, "id": rid, "text": "ab", "finish_reason": "length"})]
        return [P.Ok({"ev": P.OK, "id": rid, "cmd": message["cmd"]})]

    def loads(self) -> list[str]:
        return [c["options"]["model_path"] for c in self.commands if c["cmd"] == P.LOAD]


class Recorder(BackendListener):
    def __init__(self):
        self.seen: list[tuple[str, object]] = []
        self.changed = threading.Condition()

    def _add(self, name: str, arg=None) -> None:
        with self.changed:
            self.seen.append((name, arg))
            self.changed.notify_all()

    def wait(self, name: str, count: int = 1) -> list:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.args(name)) >= count, TIMEOUT_S), (name, self.seen)
        return self.args(name)

    def args(self, name: str) -> list:
        return [arg for n, arg in self.seen if n == name]

    def names(self) -> list[str]:
        """The news in order, without the state changes (told beside each, test_..._says_its_state)."""
        return [n for n, _ in self.seen if n != "state"]

    def engine_started(self):
        self._add("engine_started")

    def engine_restarted(self):
        self._add("engine_restarted")

    def model_loading(self, options):
        self._add("model_loading", options.model_path)

    def load_progress(self, fraction):
        self._add("load_progress", fraction)

    def model_loaded(self, info):
        self._add("model_loaded", info["path"])

    def load_failed(self, error):
        self._add("load_failed", error)

    def engine_crashed(self, error):
        self._add("engine_crashed", error)

    def state_changed(self, state):
        self._add("state", state)


@pytest.fixture
def fake():
    return FakeEngine()


@pytest.fixture
def sup(fake):
    supervisor = Supervisor(transport=fake.transport)
    recorder = Recorder()
    supervisor.add_listener(recorder)
    supervisor.recorder = recorder
    yield supervisor
    supervisor.close(timeout=0.1)


def load_good(sup) -> None:
    sup.load(GOOD)
    sup.recorder.wait("model_loaded")
    assert sup.ready and sup.info["path"] == GOOD.model_path


def answer(sup) -> list[P.Event]:
    events: queue.Queue = queue.Queue()
    sup.chat([{"role": "user", "content": "hi"}], SAMPLING, events.put)
    got = []
    while not got or not isinstance(got[-1], (P.Done, P.Failed)):
        got.append(events.get(timeout=TIMEOUT_S))
    return got


def test_load_then_chat_routes_events_by_request_id(sup, fake):
    load_good(sup)
    assert sup.recorder.names()[:3] == ["model_loading", "engine_started", "load_progress"]
    events = answer(sup)
    assert [type(e) for e in events] == [P.Token, P.Token, P.Done]
    assert len({e.request_id for e in events}) == 1 and events[0].request_id is not None
    assert not sup.busy


def test_a_load_refused_before_unloading_keeps_the_model(sup, fake):
    load_good(sup)
    fake.refuse[BAD.model_path] = (P.ErrorKind.MODEL_TOO_BIG, True)
    sup.load(BAD)
    error = sup.recorder.wait("load_failed")[0]
    assert error.kind is P.ErrorKind.MODEL_TOO_BIG and sup.load_error_kind is P.ErrorKind.MODEL_TOO_BIG
    assert sup.failed_options is BAD and sup.options is GOOD
    assert sup.ready and sup.info["path"] == GOOD.model_path  # nothing reloaded, nothing lost
    assert fake.loads() == [GOOD.model_path, BAD.model_path]


def test_a_file_llama_cpp_refuses_brings_the_last_good_model_back(sup, fake):
    load_good(sup)
    fake.refuse[BAD.model_path] = (P.ErrorKind.MODEL_LOAD, False)
    sup.load(BAD)
    error = sup.recorder.wait("load_failed")[0]
    assert error.message == f"{BAD.model_path} was refused. Loading good.gguf again."
    sup.recorder.wait("model_loaded", 2)
    assert sup.ready and sup.info["path"] == GOOD.model_path and sup.options is GOOD
    assert fake.loads() == [GOOD.model_path, BAD.model_path, GOOD.model_path]


def test_crash_during_load_restarts_with_the_last_good_model(sup, fake):
    load_good(sup)
    fake.crash_on_load.add(BAD.model_path)
    sup.load(BAD)
    crashed = sup.recorder.wait("engine_crashed")[0]
    assert "SIGSEGV" in crashed.message and crashed.message.endswith("Hearth restarts it and reloads the model.")
    assert sup.recorder.wait("load_failed")[0].kind is P.ErrorKind.ENGINE_CRASHED
    sup.recorder.wait("model_loaded", 2)
    assert len(fake.processes) == 2 and sup.info["path"] == GOOD.model_path and sup.ready
    assert fake.loads() == [GOOD.model_path, BAD.model_path, GOOD.model_path]


def test_crash_mid_answer_fails_the_request_and_reloads_the_model(sup, fake):
    load_good(sup)
    fake.crash_mid_answer = True
    events = answer(sup)
    assert [type(e) for e in events] == [P.Token, P.Token, P.Failed]
    assert events[-1].kind is P.ErrorKind.ENGINE_CRASHED and isinstance(events[-1].error(), EngineCrashed)
    fake.crash_mid_answer = False
    sup.recorder.wait("model_loaded", 2)
    assert sup.recorder.args("engine_restarted") and len(fake.processes) == 2
    assert [type(e) for e in answer(sup)] == [P.Token, P.Token, P.Done]


def test_cancel_during_load_kills_the_process_and_returns_to_the_model_before(sup, fake):
    load_good(sup)
    fake.hang_on_load.add(OTHER.model_path)
    sup.load(OTHER)
    sup.recorder.wait("load_progress", 2)  # good's 1.0, then other's 0.1: it is loading
    sup.cancel_load()
    sup.recorder.wait("model_loaded", 2)
    assert sup.info["path"] == GOOD.model_path and sup.options is GOOD
    assert not sup.recorder.args("engine_crashed")  # a deliberate end is no crash
    assert sup.recorder.args("engine_restarted") and len(fake.processes) == 2


def test_a_request_while_loading_is_refused_with_a_sentence(sup, fake):
    fake.hang_on_load.add(OTHER.model_path)
    sup.load(OTHER)
    sup.recorder.wait("load_progress")
    with pytest.raises(EngineBusy, match="still loading"):
        sup.chat([{"role": "user", "content": "hi"}], SAMPLING, lambda e: None)


def test_a_restart_storm_ends_with_an_empty_engine(sup, fake):
    fake.crash_after_load = True  # the model loads, then the engine dies at once, every time
    sup.load(GOOD)
    sup.recorder.wait("engine_crashed", MAX_CRASHES + 1)
    messages = [e.message for e in sup.recorder.args("engine_crashed")]
    assert all(m.endswith("Hearth restarts it and reloads the model.") for m in messages[:MAX_CRASHES])
    assert messages[MAX_CRASHES].endswith("Hearth restarts it without a model.")
    sup.recorder.wait("engine_started", MAX_CRASHES + 2)
    assert sup.options is None and not sup.loading and sup.info is None
    assert fake.loads() == [GOOD.model_path] * (MAX_CRASHES + 1)


def test_a_model_that_crashes_while_loading_is_not_retried(sup, fake):
    load_good(sup)
    fake.crash_on_load.add(GOOD.model_path)
    fake.processes[-1].crash()  # a crash mid-answer: restart and reload...
    sup.recorder.wait("engine_crashed", 2)  # ...which crashes while loading the very model
    assert sup.recorder.args("engine_crashed")[-1].message.endswith("without a model.")
    sup.recorder.wait("engine_started", 3)
    assert sup.options is None and fake.loads() == [GOOD.model_path] * 2


def test_an_engine_that_cannot_start_reports_a_failed_load(sup, fake):
    fake.fail_starts = 1
    sup.load(GOOD)
    error = sup.recorder.wait("load_failed")[0]
    assert error.kind is P.ErrorKind.ENGINE_CRASHED and "did not start" in error.message
    assert not sup.loading
    load_good(sup)  # the next try starts a fresh process


def test_late_events_of_a_replaced_process_are_ignored(sup, fake):
    load_good(sup)
    first = fake.processes[0]
    first.crash()
    sup.recorder.wait("model_loaded", 2)
    # The dead process's reader still says something (a load that finished as it was killed).
    first.on_event(P.Loaded({"ev": P.LOADED, "id": 1, "path": "/models/stale.gguf"}))
    assert sup.info["path"] == GOOD.model_path


def test_models_lists_the_library_with_the_loaded_one_marked(sup, fake, bundled_model):
    sup.load(P.LoadOptions(model_path=str(bundled_model)))
    sup.recorder.wait("model_loaded")
    models = sup.models()
    assert [m["path"] for m in models if m["loaded"]] == [str(bundled_model)]
    assert all(m["id"] and not m["loaded"] for m in models if m["path"] != str(bundled_model))


def test_the_supervisor_says_its_state_and_each_change_is_news(sup, fake):
    """#52.3: one state, said by the backend; no client reads its private fields to guess it."""
    assert sup.state is S.STOPPED
    load_good(sup)
    seen = sup.recorder.args("state")
    assert seen[0] in (S.STARTING, S.LOADING) and seen[-1] is S.READY and S.LOADING in seen
    events: queue.Queue = queue.Queue()
    fake.hang_answers = False
    sup.chat([{"role": "user", "content": "hi"}], SAMPLING, events.put)
    while not isinstance(events.get(timeout=TIMEOUT_S), (P.Done, P.Failed)):
        pass
    assert sup.recorder.args("state")[-2:] == [S.BUSY, S.READY] and sup.state is S.READY
    assert sup.stats()["state"] == "ready"


def test_a_crash_is_said_as_restarting_then_ready(sup, fake):
    load_good(sup)
    fake.processes[-1].crash()
    sup.recorder.wait("model_loaded", 2)
    after = sup.recorder.args("state")[sup.recorder.args("state").index(S.READY) + 1:]
    assert after[0] is S.RESTARTING and after[-1] is S.READY


def test_a_failed_load_with_nothing_to_go_back_to_is_said_failed(sup, fake):
    fake.refuse[BAD.model_path] = (P.ErrorKind.MODEL_LOAD, False)
    sup.load(BAD)
    sup.recorder.wait("load_failed")
    assert sup.state is S.FAILED and sup.recorder.args("state")[-1] is S.FAILED
    sup.unload()
    assert sup.state is S.EMPTY


def test_step_timeout_sets_a_tokens_budget_whatever_the_measured_step(fake):
    """#56 B5: --step-timeout only raised a floor under a budget measured from the first (slow) decode."""
    sup = Supervisor(transport=fake.transport)
    try:
        sup.options = P.LoadOptions(model_path="/models/good.gguf", step_timeout_s=5.0)
        sup.info = {"step_s": 6.0}  # a step measured at 6 s would make 300 s of budget
        assert sup.step_budget(1) == 5.0
        assert sup.step_budget(512) == pytest.approx(50 * 6.0 * 512)  # a prompt batch keeps its measured share
        sup.options = P.LoadOptions(model_path="/models/good.gguf")
        assert sup.step_budget(1) == 300.0  # without one, the measured budget
    finally:
        sup.close(timeout=0.1)
