"""A child process that answers questions about model vocabularies for processes that must not load llama.cpp.

The window, the API server and the CLI count tokens (does an attached document fit the context?) and check
whether a model can draft for another (the model manager's draft candidates). Both read only a vocabulary
(vocab_only: milliseconds, a few MB), but through llama.cpp, which must run only in engine processes, where a
crash costs a restart and not the window. So those questions come here, one JSON line each on stdin, and the
answer goes back as one JSON line with the same id (app/backends/vocab.py is the other side).

  {"id": 1, "op": "count", "model": PATH, "texts": [TEXT, ...]}  ->  {"ev": "counted", "id": 1, "tokens": [N, ...]}
  {"id": 2, "op": "drafts", "target": PATH, "draft": PATH}      ->  {"ev": "drafts", "id": 2, "refusal": null | TEXT}
  a model llama.cpp cannot read                                 ->  {"ev": "error", "id": N, "message": TEXT}
"""

from __future__ import annotations

import json
import sys

from app.core.errors import HearthError
from app.core.proc import emit, keep_stdout_for_events

OPEN_MODELS = 4  # vocabularies kept open (a few MB each): the chat model and the draft candidates in turn


def _answer(request: dict, counters: dict) -> None:
    from app.engine.decoding.token_count import TokenCounter
    from app.engine.speculation.vocab_compat import check_draft_compatible

    rid, op = request.get("id"), request.get("op")
    try:
        if op == "count":
            path = str(request["model"])
            counter = counters.pop(path, None) or TokenCounter(path)
            counters[path] = counter  # the newest last: the oldest is closed first
            while len(counters) > OPEN_MODELS:
                counters.pop(next(iter(counters))).close()
            if not counter.exact:
                raise HearthError(f"{path} has no vocabulary llama.cpp can read.")
            emit("counted", id=rid, tokens=[counter.count(str(t)) for t in request["texts"]])
        elif op == "drafts":
            try:
                check_draft_compatible(request["target"], request["draft"])
                emit("drafts", id=rid, refusal=None)
            except HearthError as exc:
                emit("drafts", id=rid, refusal=str(exc))
        else:
            emit("error", id=rid, message=f"unknown question {op!r}")
    except (HearthError, KeyError, TypeError) as exc:
        emit("error", id=rid, message=str(exc))


def main() -> int:
    keep_stdout_for_events()
    counters: dict = {}
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if isinstance(request, dict):
            _answer(request, counters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
