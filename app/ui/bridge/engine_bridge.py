"""The window's adapter to the backend seam: backend news become Qt signals.

The window chats with one backend at a time: the local engine's Supervisor (always kept, so the
Server page can serve it and switching back is instant) or a RemoteEndpoint chosen on the
Connections page (`use_backend`). A remote cannot know some figures (memory, n_past, ...): they
arrive as None and every slot must take that.

An answer with tools (`chat_with_tools`: the chat's MCP servers) is one answer to the window, however many
rounds of calls it takes (app/ui/bridge/tool_answer.py runs it): its shown text arrives as token_received, each call
as tool_call_started, tool_approval_needed (the user answers with tools.answer) and tool_call_finished,
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
from app.backends.backend import Backend
from app.backends.supervisor import Supervisor
from app.ui.bridge.bridge_signals import STREAM_INTERVAL_MS, BridgeListener
from app.ui.bridge.tool_answer import ToolAnswers


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
    state_changed = Signal(object)  # the backend's EngineState (app/backends/backend.py), as it says it
    backend_changed = Signal(object)  # the Backend the window now talks to
    model_unloaded = Signal()  # the user ejected the local model
    # A tool call of the answer in progress, as CallRecord.to_json() (app/tools/tool_chat.py) with its "state".
    tool_call_started = Signal(object)
    tool_approval_needed = Signal(object)  # {server, tool, arguments, id}: tools.answer() answers it
    tool_call_finished = Signal(object)

    def __init__(self, parent: QObject | None = None, backend: Supervisor | None = None):
        super().__init__(parent)
        self.local = backend or Supervisor(below_caller=True)  # see Supervisor.for_window
        self.backend: Backend = self.local
        self._listener = BridgeListener(self)
        self.backend.add_listener(self._listener)
        self.request_id: int | None = None  # the window's latest answer
        self._busy = False  # that answer is still coming
        self._switches = 0  # an answer's events count only while the backend it was asked of is in use
        self.failed_text = ""  # the partial answer of the latest failed request (a stream cut mid-answer)
        self._waiting = False  # the window's answer waits behind other requests on the local engine
        self.tools = ToolAnswers(self)  # the answer with tools in progress, and the MCP servers kept started

    # --- state, as the supervisor has it ----------------------------------
    @property
    def remote(self) -> bool:
        return self.backend is not self.local

    pid = property(lambda self: self.backend.pid)
    ready = property(lambda self: self.backend.ready)
    loading = property(lambda self: self.backend.loading)
    info = property(lambda self: self.backend.info)
    busy = property(lambda self: self._busy)
    switches = property(lambda self: self._switches)

    @property
    def state(self):
        """The backend's EngineState, as it says it (state_changed tells each change)."""
        return self.backend.state

    @property
    def waiting_turn(self) -> bool:
        """The window's answer was asked while other requests (the API server's, on the same engine) were being
        answered: the engine takes them in turn, and nothing of this one has come yet."""
        return self._busy and self._waiting

    # The local engine's load state (the Models page's business; a remote loads its own models).
    options = property(lambda self: None if self.remote else self.local.options)
    failed_options = property(lambda self: None if self.remote else self.local.failed_options)
    load_error_kind = property(lambda self: None if self.remote else self.local.load_error_kind)

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
            if not self.tools.cancel(forget=True):
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
        self._waiting = not self.remote and self.backend.busy
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
        """Start the window's answer with the tools of these MCP servers (each call waits for the user, who
        answers through `tools.answer`); False when the engine cannot take it now (app/ui/bridge/tool_answer.py)."""
        if not self.ready or self._busy:
            return False
        self._waiting = not self.remote and self.backend.busy
        self._busy = True
        self.failed_text = ""
        self.tools.start(messages, sampling, servers, choice, forced, pinned, max_rounds)
        self.generation_started.emit(self._waiting)
        return True

    def cancel(self) -> None:
        if not self.tools.cancel() and self._busy:
            self.backend.cancel(self.request_id)

    def reset(self) -> None:
        """Forget the KV cache (the engine keeps it for the next turn of the same chat)."""
        if self.backend.alive and not self.busy:
            self.backend.reset()

    def close(self) -> None:
        self.tools.close()
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
