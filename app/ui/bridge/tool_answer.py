"""The window's answer with tools: app/tools/tool_chat.answer_with_tools on a thread of its own, never the GUI's.

Each round of the answer is one request on the backend the bridge uses, so the monitor, the status bar and Stop
see it as any answer. A call waits for the user on this thread: the bridge says `tool_approval_needed`, the chat
page's buttons answer through `answer()` (a queue), and Stop (`cancel()`) wakes the wait, stops a call that runs
and cancels the generation, so nothing waits on a user who has gone or a server that hangs.
"""

from __future__ import annotations

import queue
import threading
import traceback

from app.core.errors import HearthError
from app.protocol import messages as P

WAKE_S = 0.25  # how often a wait looks at the stop flag (the approval, the engine's next event)


class _RoundClient:
    """answer_with_tools' client: chat() is one request on the bridge's backend, its events as an iterator."""

    def __init__(self, answer: "ToolAnswer"):
        self.answer = answer

    def chat(self, messages, sampling, tools=None):
        answer, bridge = self.answer, self.answer.bridge
        from app.ui.bridge.bridge_signals import STREAM_INTERVAL_MS

        events: queue.Queue = queue.Queue()
        answer.request_id = answer.backend.chat(messages, sampling, events.put, STREAM_INTERVAL_MS, tools=tools)
        if answer.stop.is_set():  # stopped while the request was being made
            answer.backend.cancel(answer.request_id)
        while True:
            try:
                event = events.get(timeout=WAKE_S)
            except queue.Empty:
                if answer.abandoned.is_set():  # the window closes: no one reads this answer
                    raise HearthError("The answer was stopped because the window closed.") from None
                continue
            if answer.current:
                bridge.tools.round_event(event)
            if isinstance(event, P.Failed):
                answer.failed = event
                raise event.error()
            yield event
            if isinstance(event, P.Done):
                return

    def cancel(self, _request_id=None) -> None:
        self.answer.cancel()


class ToolAnswer:
    def __init__(self, bridge, backend, messages: list[dict], sampling, servers: list[str], pool, n_ctx: int,
                 choice: str = "auto", forced: str | None = None, pinned: dict | None = None,
                 max_rounds: int | None = None):
        self.bridge, self.backend = bridge, backend
        self.messages, self.sampling, self.servers, self.pool = messages, sampling, servers, pool
        self.n_ctx, self.choice, self.forced, self.pinned = n_ctx, choice, forced, pinned
        self.max_rounds = max_rounds
        self.stop = threading.Event()
        self.abandoned = threading.Event()
        self.request_id: int | None = None
        self.failed: P.Failed | None = None
        self.switches = bridge.switches  # news count only while the backend it was asked of is in use
        self._answers: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="hearth-tool-answer", daemon=True)

    @property
    def current(self) -> bool:
        return self.switches == self.bridge.switches and not self.abandoned.is_set()

    def start(self) -> None:
        self.thread.start()

    def answer(self, decision: str) -> None:
        """The user's answer to the call that waits (GUI thread)."""
        self._answers.put(decision)

    def cancel(self) -> None:
        """Stop: a waiting call is answered "stopped", a running one ends, the generation is cancelled."""
        from app.tools.servers import STOPPED

        self.stop.set()
        self._answers.put(STOPPED)
        if self.request_id is not None:
            self.backend.cancel(self.request_id)

    def abandon(self, timeout: float = 5.0) -> None:
        """The window closes: stop, and wait for the thread (a call's own timeout bounds what it waits for)."""
        self.abandoned.set()
        self.cancel()
        self.thread.join(timeout)

    def _approve(self, server: str, tool: str, arguments: dict) -> str:
        from app.tools.servers import ALWAYS, ONCE, STOPPED

        if self.current:
            self.bridge.tool_approval_needed.emit({"server": server, "tool": tool, "arguments": arguments,
                                                   "id": self._record.id})
        while True:
            try:
                decision = self._answers.get(timeout=WAKE_S)
            except queue.Empty:
                if self.stop.is_set():
                    return STOPPED
                continue
            if self.stop.is_set():
                return STOPPED
            if decision in (ONCE, ALWAYS) and self.current:  # allowed: it runs from now on
                self.bridge.tool_call_started.emit({**self._record.to_json(), "decision": decision,
                                                    "state": "running"})
            return decision

    def _on_call(self, record) -> None:
        self._record = record  # the call the approval is asked for next
        if self.current:
            # "called": it runs at once if the tool is always allowed, else it waits for the user next.
            self.bridge.tool_call_started.emit({**record.to_json(), "state": "called"})

    def _on_result(self, record) -> None:
        if self.current:
            self.bridge.tool_call_finished.emit({**record.to_json(), "state": "done"})

    def _on_text(self, text: str) -> None:
        if self.current:
            self.bridge.token_received.emit(text)

    def _run(self) -> None:
        from app.tools.tool_chat import MAX_ROUNDS, answer_with_tools

        try:
            tools = self.pool.tool_set(self.servers, self.pinned)
            # Results are measured in characters / 4, not the model's tokens: a vocabulary load per answer
            # (app/engine/decoding/token_count.py) costs more than that estimate's error on a quarter of the context.
            turn = answer_with_tools(_RoundClient(self), self.messages, self.sampling, tools, self._approve,
                                     choice=self.choice, forced=self.forced, n_ctx=self.n_ctx,
                                     max_rounds=self.max_rounds or MAX_ROUNDS,
                                     on_text=self._on_text, on_call=self._on_call, on_result=self._on_result,
                                     stop=self.stop)
        except HearthError as exc:
            self.bridge.tools.ended(self, None, str(exc))
            return
        except Exception as exc:  # a bug: one line for the user, the trace for the log
            traceback.print_exc()
            self.bridge.tools.ended(self, None, f"Internal error: {type(exc).__name__}: {exc}")
            return
        last = turn.added[-1] if turn.added else {}
        final = last.get("role") == "assistant" and not last.get("tool_calls")  # else stopped after its calls
        text = (last.get("content") or "") if final else ""
        done = P.Done({**turn.done, "text": text, "tool_calls": [c.to_json() for c in turn.calls],
                       **({"tool_notice": turn.notice} if turn.notice else {})})
        self.bridge.tools.ended(self, done, None)


class ToolAnswers:
    """The bridge's answers with tools: the one in progress (a ToolAnswer) and the MCP servers started for the
    chat's answers, kept between them until the window closes."""

    def __init__(self, bridge):
        self.bridge = bridge
        self.current: ToolAnswer | None = None
        self._pool = None

    def start(self, messages: list[dict], sampling, servers: list[str], choice: str = "auto",
              forced: str | None = None, pinned: dict | None = None, max_rounds: int | None = None) -> None:
        if self._pool is None:
            from app.tools.pool import ServerPool

            self._pool = ServerPool()
        bridge = self.bridge
        n_ctx = int((bridge.info or {}).get("n_ctx") or 2048)
        self.current = ToolAnswer(bridge, bridge.backend, messages, sampling, servers, self._pool, n_ctx, choice,
                                  forced, pinned, max_rounds)
        self.current.start()

    def answer(self, decision: str) -> None:
        """The user's answer to the call that waits: app.tools.servers' ONCE, ALWAYS or DENY."""
        if self.current is not None:
            self.current.answer(decision)

    def cancel(self, forget: bool = False) -> bool:
        """Stop the answer with tools in progress; False when there is none. forget: its news no longer count."""
        answer = self.current
        if answer is None:
            return False
        answer.cancel()
        if forget:
            self.current = None
        return True

    def round_event(self, event: P.Event) -> None:
        """A round's figures, as any answer's (the answer's thread): its tokens come through the call reader."""
        bridge = self.bridge
        if bridge._waiting:
            bridge._waiting = False
            bridge.turn_started.emit()
        if isinstance(event, P.Progress):
            bridge.prompt_progress.emit(int(event.get("prompt_done") or 0), int(event.get("prompt_total") or 0))
        elif isinstance(event, P.Stats):
            bridge.stats_received.emit(event)

    def ended(self, answer: ToolAnswer, done: P.Done | None, error: str | None) -> None:
        """The answer's thread is done: one Done, or the one sentence of its failure."""
        if answer is not self.current or not answer.current:
            return  # the window switched servers meanwhile (it said so), or closes
        bridge = self.bridge
        self.current = None
        bridge._busy = False
        if done is not None:
            bridge.generation_finished.emit(done)
        elif answer.failed is None or answer.failed.kind is not P.ErrorKind.ENGINE_CRASHED:  # a crash is told once
            bridge.failed_text = (answer.failed.get("text") or "") if answer.failed is not None else ""
            bridge.generation_failed.emit(error)

    def drop_server(self, name: str) -> None:
        """A server changed or removed on the Tools page: its process ends now (the next answer starts it)."""
        if self._pool is not None:
            self._pool.drop(name)

    def close(self) -> None:
        if self.current is not None:
            self.current.abandon()
            self.current = None
        if self._pool is not None:
            self._pool.close()
