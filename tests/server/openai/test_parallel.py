"""`hearth serve --parallel 2` with the official OpenAI client: streams answered side by side, a client that
leaves frees its slot, and the figures a benchmark reads."""

from __future__ import annotations

import threading
import time

import pytest
from openai import OpenAI

from tests.server.conftest import start_server, stop_server

pytestmark = pytest.mark.slow

MODEL = "SmolLM2-135M-Instruct.Q4_1"
FIXED = {"ignore_eos": True}  # llama-server's and vLLM's extension: answers of exactly max_tokens


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    proc, url = start_server("--parallel", "2", env={"HEARTH_HOME": str(tmp_path_factory.mktemp("par_home"))})
    yield url
    stop_server(proc)


@pytest.fixture
def client(base) -> OpenAI:
    return OpenAI(base_url=base, api_key="none", max_retries=0, timeout=120)


class Stream:
    """One streamed chat on its own thread, with when its first and last chunks came."""

    def __init__(self, client: OpenAI, question: str, max_tokens: int, leave_after: int | None = None):
        self.first = self.last = None
        self.text, self.finish, self.usage = "", None, None
        self.thread = threading.Thread(target=self._run, args=(client, question, max_tokens, leave_after))
        self.thread.start()

    def _run(self, client, question, max_tokens, leave_after) -> None:
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": question}], temperature=0, max_tokens=max_tokens,
            stream=True, stream_options={"include_usage": True}, extra_body=FIXED)
        chunks = 0
        for chunk in stream:
            now = time.monotonic()
            if chunk.choices and chunk.choices[0].delta.content:
                self.first = self.first or now
                self.text += chunk.choices[0].delta.content
                chunks += 1
                if leave_after is not None and chunks >= leave_after:
                    stream.close()  # the client goes away mid-answer
                    break
            if chunk.choices and chunk.choices[0].finish_reason:
                self.finish = chunk.choices[0].finish_reason
            if chunk.usage is not None:
                self.usage = chunk.usage
            self.last = now

    def join(self) -> "Stream":
        self.thread.join(120)
        assert not self.thread.is_alive()
        return self


def test_two_streams_are_answered_side_by_side(client):
    a = Stream(client, "Tell me a long story about a lighthouse.", 120)
    b = Stream(client, "Explain how bread is baked.", 120)
    a.join(), b.join()
    for s in (a, b):
        assert s.finish == "length" and s.usage.completion_tokens == 120
    # Each answer began before the other ended: they ran at the same time, not one after the other.
    assert a.first < b.last and b.first < a.last


def test_a_client_that_leaves_frees_its_slot_at_once(client):
    going = Stream(client, "Write a long poem about the sea.", 400)
    leaving = Stream(client, "Describe a market in the morning.", 400, leave_after=3)
    leaving.join()
    # Both slots were taken; the one whose client left is free again while the other still answers.
    started = time.monotonic()
    late = Stream(client, "Name three colors.", 8).join()
    assert late.finish == "length" and late.usage.completion_tokens == 8
    going.join()
    assert late.last < going.last, "the third request waited for the long answer instead of the freed slot"
    assert late.first - started < 30


def test_predictions_are_served_in_parallel_slots(client):
    """Each of two concurrent requests drafts from its own prediction; usage counts what each one predicted."""
    ask = [{"role": "user", "content": "Write the numbers from one to ten in words, one per line."}]
    first = client.chat.completions.create(model=MODEL, messages=ask, temperature=0, max_tokens=40)
    results = [None, None]

    def run(i: int) -> None:
        results[i] = client.chat.completions.create(
            model=MODEL, messages=ask, temperature=0, max_tokens=40,
            prediction={"type": "content", "content": first.choices[0].message.content})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for r in results:
        assert r.usage.completion_tokens_details.accepted_prediction_tokens > r.usage.completion_tokens // 2
