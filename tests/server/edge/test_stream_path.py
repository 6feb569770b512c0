"""The API's per-token path: each token's chunk from one encoded template, and a backlog handed on as one piece.

TextFrame must give exactly the bytes the general encoder gives for the same object (the conformance and SDK
tests read them as JSON; these hold them byte for byte, for the texts that JSON escapes). EngineStream is fed
through its sink from another thread, as the engine pipe's reader feeds it.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.protocol import messages as P
from app.server.answers import TextFrame, compact_json
from app.server.edge.streams import EngineStream

TEXTS = ["", "Hello", ' "quoted" ', "back\\slash", "line\nbreak\ttab\r", "\x00\x1f\x7f", "émoji 🐉 中文",
         "\u2028\u2029", "</think>", "{\"a\": [1, 2]}"]


@pytest.mark.parametrize("text", TEXTS)
def test_frame_bytes_equal_the_general_encoding(text):
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m \"q\"",
             "system_fingerprint": None,
             "choices": [{"index": 0, "delta": {"content": TextFrame.SLOT}, "logprobs": None, "finish_reason": None}]}
    frame = TextFrame(chunk)
    chunk["choices"][0]["delta"]["content"] = text
    assert frame(text) == b"data: " + compact_json(chunk) + b"\n\n"
    delta = {"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": TextFrame.SLOT}}
    frame = TextFrame(delta, head=b"event: content_block_delta\ndata: ")
    delta["delta"]["text"] = text
    assert frame(text) == b"event: content_block_delta\ndata: " + compact_json(delta) + b"\n\n"


def test_a_template_without_exactly_one_place_is_refused():
    with pytest.raises(ValueError):
        TextFrame({"text": "no slot"})
    with pytest.raises(ValueError):
        TextFrame({"a": TextFrame.SLOT, "b": TextFrame.SLOT})


class _Cancels:
    def __init__(self):
        self.cancelled = []

    def cancel(self, request_id):
        self.cancelled.append(request_id)


def _collect(feed, stop_after: int | None = None):
    """Run a stream whose events come from feed(sink) on another thread; the events the handler saw."""
    async def main():
        backend = _Cancels()
        started = {}

        def start(sink):
            started["sink"] = sink
            return 7

        stream = EngineStream(backend, start)
        thread = threading.Thread(target=feed, args=(started["sink"],))
        thread.start()
        seen = []
        async for event in stream.events():
            seen.append(event)
            if stop_after is not None and len(seen) == stop_after:
                break
        await asyncio.sleep(0)
        thread.join()
        return seen, backend.cancelled

    return asyncio.run(main())


def test_a_backlog_of_tokens_arrives_as_one_piece_in_order():
    def feed(sink):
        sink(P.Stats({"ev": P.STATS, "id": 7, "prompt_tokens": 3}))
        for i in range(50):
            sink(P.Token({"ev": P.TOKEN, "id": 7, "text": f"{i},"}))
        sink(P.Token({"ev": P.TOKEN, "id": 7, "text": "x", "logprobs": [1]}))  # not plain: kept as it is
        sink(P.Token({"ev": P.TOKEN, "id": 7, "text": "y"}))
        sink(P.Done({"ev": P.DONE, "id": 7, "completion_tokens": 52}))

    seen, cancelled = _collect(feed)
    assert isinstance(seen[0], P.Stats) and isinstance(seen[-1], P.Done)
    tokens = [e for e in seen if isinstance(e, P.Token)]
    assert "".join(t.text for t in tokens) == "".join(f"{i}," for i in range(50)) + "xy"
    assert any(t.get("logprobs") == [1] and t.text == "x" for t in tokens)
    assert len(tokens) < 52  # all 50 were waiting before the handler ran: fewer pieces than tokens
    assert cancelled == []  # it ended with its Done


def test_tokens_spaced_out_each_arrive_at_once_and_leaving_early_cancels():
    import time

    def feed(sink):
        for i in range(5):
            sink(P.Token({"ev": P.TOKEN, "id": 7, "text": str(i)}))
            time.sleep(0.02)

    seen, cancelled = _collect(feed, stop_after=3)
    assert [e.text for e in seen] == ["0", "1", "2"]  # no delay, no merge: each came alone
    assert cancelled == [7]
