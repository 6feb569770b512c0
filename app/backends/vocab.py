"""Token counts and draft checks from the vocabulary child (app/engine/process/vocab.py), for processes that
must not load llama.cpp: the window, the API server and the CLI.

One child serves the whole process, started on the first question (about half a second) and kept; questions
are answered one at a time. If it dies (llama.cpp crashing on a file) the question that killed it gets no
answer, the next one starts a new child. Counts fall back to an estimate wherever no exact answer comes.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path

from app.core.errors import HearthError
from app.core.proc import JsonChild

MODULE = "app.engine.process.vocab"
CHARS_PER_TOKEN = 4.0  # the estimate for English prose where no vocabulary is at hand
ANSWER_S = 30.0  # a vocabulary of 262k tokens opens in well under a second; past this the child is taken as stuck


class VocabError(HearthError):
    pass


class _Child:
    def __init__(self):
        self._lock = threading.Lock()
        self._child: JsonChild | None = None
        self._answers: queue.Queue = queue.Queue()
        self._next = 0

    def ask(self, **question) -> dict:
        with self._lock:
            if self._child is None or not self._child.alive:
                self._start()
            self._next += 1
            rid = self._next
            try:
                self._child.send((json.dumps({"id": rid, **question}) + "\n").encode())
                while True:
                    answer = self._answers.get(timeout=ANSWER_S)
                    if answer is None:
                        raise VocabError("The vocabulary reader stopped (llama.cpp could not read a model).")
                    if answer.get("id") == rid:
                        break
            except (OSError, queue.Empty) as exc:
                self._stop()
                raise VocabError("The vocabulary reader did not answer.") from exc
            except VocabError:
                self._stop()
                raise
            if answer.get("ev") == "error":
                raise VocabError(answer.get("message") or "The vocabulary could not be read.")
            return answer

    def _start(self) -> None:
        self._stop()
        self._answers = queue.Queue()
        self._child = JsonChild(MODULE, interactive=True, on_event=self._answers.put)

    def _stop(self) -> None:
        if self._child is not None:
            try:
                self._child.close()
            except OSError:
                pass
            self._child = None

    def close(self) -> None:
        with self._lock:
            self._stop()


_shared = _Child()


def close() -> None:
    """End the child (the next question starts another)."""
    _shared.close()


class TokenCounter:
    """text -> tokens for a model: its own vocabulary's count (exact) where it is a readable local file, else an
    estimate of CHARS_PER_TOKEN characters a token."""

    def __init__(self, model_path: str | Path | None):
        self.path = str(model_path) if model_path and os.path.isfile(model_path) else None
        self.exact = False
        if self.path is not None:
            try:
                _shared.ask(op="count", model=self.path, texts=[""])
                self.exact = True
            except VocabError:
                self.path = None

    def count(self, text: str) -> int:
        return self.count_many([text])[0]

    def count_many(self, texts: list[str]) -> list[int]:
        if self.exact:
            try:
                return list(_shared.ask(op="count", model=self.path, texts=list(texts))["tokens"])
            except VocabError:
                pass
        return [0 if not t else max(1, round(len(t) / CHARS_PER_TOKEN)) for t in texts]

    def close(self) -> None:
        pass  # the child keeps a few vocabularies open for the process


def draft_refusal(target: str | Path, draft: str | Path) -> str | None:
    """Why draft cannot propose tokens for target (llama.cpp's own rule), or None when it can."""
    try:
        return _shared.ask(op="drafts", target=str(target), draft=str(draft))["refusal"]
    except VocabError as exc:
        return str(exc)
