"""The window's adapter to the backend seam: backend news become Qt signals.

The window chats with one backend at a time: the local engine's Supervisor (always kept, so the
Server page can serve it and switching back is instant) or a RemoteEndpoint chosen on the
Connections page (`use_backend`). A remote cannot know some figures (memory, n_past, ...): they
arrive as None and every slot must take that.

An answer with tools (`chat_with_tools`: the chat's MCP servers) is one answer to the window, however many
rounds of calls it takes (app/ui/tool_answer.py runs it): its shown text arrives as token_received, each call
as tool_call_started, tool_approval_needed (the user answers with answer_tool_call) and tool_call_finished,
and it ends in one generation_finished (its Done has the calls, "tool_calls") or generation_failed. The
servers stay started between answers (app/tools/pool.py) until the window closes.

Everything that decides (starting, loading, falling back to the last good
model, restarting after a crash) lives in the Qt-free supervisor
(app.backends.supervisor), which the CLI and the API server use too. The
supervisor reports on its own threads; signals emitted there reach the
window's slots queued, on the GUI thread, in the order they were emitted.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.core.errors import HearthError
from app.protocol import messages as P
from app.backends.backend import Backend, BackendListener
from app.backends.supervisor import Supervisor
from app.ui.models.titles import path_title

# Tokens arrive merged at most this often (app.protocol.coalesce), matching the transcript's FLUSH_MS:
# one event per token cost the window ~0.5 ms of CPU per token, CPU the engine's threads need.
STREAM_INTERVAL_MS = 80


def model_title(info: dict | None) -> str:
    """A loaded model's name for labels (a `loaded` event), where the library's title is not at hand: a local
    model's file as the user knows it (general.name is no use: "Smollm2 135M 8k Lc100K Mix1 Ep2" for every copy
    of the bundled model; the Models page's details show it), a remote model's name on its server; "" for none."""
    if not info:
        return ""
    if info.get("remote") or not info.get("path"):
        return info.get("name") or info.get("model", "")
    return path_title(info["path"], [])


class EngineBridge(QObject):
    engine_started = Signal()
    model_loading = Signal(object)  # LoadOptions
    model_loaded = Signal(object)
    load_progress = Signal(float)  # 0..1, about ten a second while llama.cpp reads the weights
    load_failed = Signal(str)
    # The window's answer was asked (waiting: other requests, the API's, are answered first).
    generation_started = Signal(bool)
    token_received = Signal(str)
    # The window's answer before its first token: it waited for other requests (the API's) and its turn came;
    # a long prompt's reading, (tokens read, tokens to read), after each batch.
    turn_started = Signal()
    prompt_progress = Signal(int, int)
    stats_received = Signal(object)
    generation_finished = Signal(object)
    generation_failed = Signal(str)
    engine_crashed = Signal(str)
    engine_restarted = Signal()
    backend_changed = Signal(object)  # the Backend the window now talks to
    model_unloaded = Signal()  # the user ejected the local model
    # A tool call of the answer in progress, as CallRecord.to_json() (app/tools/tool_chat.py) with its "state".
    tool_call_started = Signal(object)
    tool_approval_needed = Signal(object)  # {server, tool, arguments, id}: answer_tool_call() answers it
    tool_call_finished = Signal(object)

    def __init__(self, parent: QObject | None = None, backend: Supervisor | None = None):
        super().__init__(parent)
        self.local = backend or Supervisor(below_caller=True)  # see Supervisor.for_window
        self.backend: Backend = self.local
        self._listener = _Signals(self)
        self.backend.add_listener(self._listener)
        self.request_id: int | None = None  # the window's latest answer
        self._busy = False  # that answer is still coming
        self._switches = 0  # an answer's events count only while the backend it was asked of is in use
        self.failed_text = ""  # the partial answer of the latest failed request (a stream cut mid-answer)
        self._waiting = False  # the window's answer waits behind other requests on the local engine
        self._tool_answer = None  # the answer with tools in progress (app/ui/tool_answer.py)
        self._tool_pool = None  # the MCP servers started for the chat's answers, kept between them

    # --- state, as the supervisor has it ----------------------------------
    @property
    def remote(self) -> bool:
        return self.backend is not self.local

    @property
    def pid(self) -> int | None:
        return getattr(self.backend, "pid", None)

    @property
    def ready(self) -> bool:
        return self.backend.ready

    @property
    def loading(self) -> bool:
        return self.backend.loading

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def switches(self) -> int:
        return self._switches

    @property
    def info(self) -> dict | None:
        return self.backend.info

    @property
    def waiting_turn(self) -> bool:
        """The window's answer was asked while other requests (the API server's, on the same engine) were being
        answered: the engine takes them in turn, and nothing of this one has come yet."""
        return self._busy and self._waiting

    # The local engine's load state (the Models page's business; a remote loads its own models).
    @property
    def options(self) -> P.LoadOptions | None:
        return None if self.remote else self.local.options

    @property
    def failed_options(self) -> P.LoadOptions | None:
        return None if self.remote else self.local.failed_options

    @property
    def load_error_kind(self) -> P.ErrorKind | None:
        return None if self.remote else self.local.load_error_kind

    # --- which backend ---------------------------------------------------------
    def use_backend(self, backend: Backend) -> None:
        """Talk to backend from now on; an answer in progress on the old one is stopped.

        A remote that is replaced is closed; the local Supervisor is kept (its model stays loaded)."""
        if backend is self.backend:
            return
        old = self.backend
        old.remove_listener(self._listener)
        self._switches += 1
        if self._busy:
            if self._tool_answer is not None:
                self._tool_answer.cancel()
                self._tool_answer = None
            else:
                old.cancel(self.request_id)
            self._busy = False
            self.generation_failed.emit("The answer was stopped because the window switched servers.")
        if old is not self.local:
            old.close(timeout=1.0)
        self.backend = backend
        backend.add_listener(self._listener)
        self.backend_changed.emit(backend)
        if backend.info is not None and backend.ready:
            self.model_loaded.emit(backend.info)

    def use_local(self) -> None:
        self.use_backend(self.local)

    # --- commands (GUI thread; none blocks) --------------------------------
    def load(self, options: P.LoadOptions) -> None:
        self.backend.load(options)

    def cancel_load(self) -> None:
        self.backend.cancel_load()

    def unload(self) -> None:
        """Eject the local model (its answer in progress stops); the engine stays up for the next load."""
        if self.remote or self.local.info is None:
            return
        self.cancel()
        self.local.unload()
        self.model_unloaded.emit()

    def chat(self, messages: list[dict], sampling: P.SamplingOptions) -> bool:
        """Start the window's answer; False when the engine cannot take it now."""
        if not self.ready or self._busy:
            return False
        # Asked now, the engine answers the requests before it first (app/engine/process/host.py takes them in order).
        self._waiting = not self.remote and bool(getattr(self.backend, "busy", False))
        self._busy = True  # before the request exists: its answer may end before chat() returns
        self.failed_text = ""
        try:
            switches = self._switches

            def sink(event: P.Event) -> None:
                if switches == self._switches:  # else asked of a backend the window has left
                    self._on_request_event(event)

            self.request_id = self.backend.chat(messages, sampling, sink, STREAM_INTERVAL_MS)
        except HearthError:
            self._busy = False
            return False
        self.generation_started.emit(self._waiting)  # before its events, which come queued from other threads
        return True

    def chat_with_tools(self, messages: list[dict], sampling: P.SamplingOptions, servers: list[str],
                        choice: str = "auto", forced: str | None = None, pinned: dict | None = None,
                        max_rounds: int | None = None) -> bool:
        """Start the window's answer with the tools of these MCP servers (each call waits for the user);
        False when the engine cannot take it now. The servers start on the answer's thread."""
        if not self.ready or self._busy:
            return False
        from app.ui.tool_answer import ToolAnswer

        if self._tool_pool is None:
            from app.tools.pool import ServerPool

            self._tool_pool = ServerPool()
        self._waiting = not self.remote and bool(getattr(self.backend, "busy", False))
        self._busy = True
        self.failed_text = ""
        n_ctx = int((self.info or {}).get("n_ctx") or 2048)
        self._tool_answer = ToolAnswer(self, self.backend, messages, sampling, servers, self._tool_pool, n_ctx,
                                       choice, forced, pinned, max_rounds)
        self._tool_answer.start()
        self.generation_started.emit(self._waiting)
        return True

    def answer_tool_call(self, decision: str) -> None:
        """The user's answer to the call that waits: app.tools.servers' ONCE, ALWAYS or DENY."""
        if self._tool_answer is not None:
            self._tool_answer.answer(decision)

    def forward_round_event(self, event: P.Event) -> None:
        """A round's figures, as any answer's (the answer's thread): its tokens come through the call reader."""
        if self._waiting:
            self._waiting = False
            self.turn_started.emit()
        if isinstance(event, P.Progress):
            self.prompt_progress.emit(int(event.get("prompt_done") or 0), int(event.get("prompt_total") or 0))
        elif isinstance(event, P.Stats):
            self.stats_received.emit(event)

    def tool_answer_ended(self, answer, done: P.Done | None, error: str | None) -> None:
        """The answer's thread is done: one Done, or the one sentence of its failure."""
        if answer is not self._tool_answer or not answer.current:
            return  # the window switched servers meanwhile (it said so), or closes
        self._tool_answer = None
        self._busy = False
        if done is not None:
            self.generation_finished.emit(done)
        elif answer.failed is None or answer.failed.kind is not P.ErrorKind.ENGINE_CRASHED:  # a crash is told once
            self.failed_text = (answer.failed.get("text") or "") if answer.failed is not None else ""
            self.generation_failed.emit(error)

    def drop_tool_server(self, name: str) -> None:
        """A server changed or removed on the Tools page: its process ends now (the next answer starts it)."""
        if self._tool_pool is not None:
            self._tool_pool.drop(name)

    def cancel(self) -> None:
        if self._tool_answer is not None:
            self._tool_answer.cancel()
        elif self._busy:
            self.backend.cancel(self.request_id)

    def reset(self) -> None:
        """Forget the KV cache (the engine keeps it for the next turn of the same chat)."""
        if getattr(self.backend, "alive", True) and not self.busy:
            self.backend.reset()

    def close(self) -> None:
        if self._tool_answer is not None:
            self._tool_answer.abandon()
            self._tool_answer = None
        if self._tool_pool is not None:
            self._tool_pool.close()
        self.backend.remove_listener(self._listener)
        if self.remote:
            self.backend.close(timeout=3.0)
        self.local.close(timeout=3.0)

    # --- the window's request (supervisor threads) -------------------------
    def _on_request_event(self, event: P.Event) -> None:
        if self._waiting:  # the first news of this answer: its turn has come
            self._waiting = False
            self.turn_started.emit()
        if isinstance(event, P.Token):
            self.token_received.emit(event.text)
        elif isinstance(event, P.Progress):
            self.prompt_progress.emit(int(event.get("prompt_done") or 0), int(event.get("prompt_total") or 0))
        elif isinstance(event, P.Stats):
            self.stats_received.emit(event)
        elif isinstance(event, P.Done):
            self._busy = False
            self.generation_finished.emit(event)
        elif isinstance(event, P.Failed):
            self._busy = False
            self.failed_text = event.get("text") or ""
            if event.kind is not P.ErrorKind.ENGINE_CRASHED:  # a crash is told once, by engine_crashed
                self.generation_failed.emit(event.message)


class _Signals(BackendListener):
    """The supervisor's news as the bridge's signals."""

    def __init__(self, bridge: EngineBridge):
        self.bridge = bridge

    def engine_started(self) -> None:
        self.bridge.engine_started.emit()

    def engine_restarted(self) -> None:
        self.bridge.engine_restarted.emit()

    def model_loading(self, options: P.LoadOptions) -> None:
        self.bridge.model_loading.emit(options)

    def load_progress(self, fraction: float) -> None:
        self.bridge.load_progress.emit(fraction)

    def model_loaded(self, info: P.Loaded) -> None:
        self.bridge.model_loaded.emit(info)

    def load_failed(self, error: P.Failed) -> None:
        self.bridge.load_failed.emit(error.message)

    def engine_crashed(self, error: P.Failed) -> None:
        self.bridge.engine_crashed.emit(error.message)

    def engine_error(self, error: P.Failed) -> None:
        self.bridge.generation_failed.emit(error.message)
