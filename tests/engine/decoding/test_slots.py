"""Parallel slots on the real bundled model: answers decoded together, each in its own KV sequence.

In-process tests drive a Session's Slots as the engine host does (start, then step until none runs), so they
can look at each sequence of the KV cache; the last test goes through the engine process.
"""

from __future__ import annotations

import threading

import llama_cpp
import numpy as np
import pytest

from app.protocol import messages as P
from app.backends.client import EngineClient
from app.protocol.messages import DONE, LoadOptions, SamplingOptions
from app.engine.decoding.runtime import Runtime
from app.engine.process.session import Session
from tests.engine.kv_checks import KERNEL_COS, assert_cache_consistent, cosine, fresh_logits
from tests.engine.spec_checks import predicted

CTX = 256  # per slot

PROMPTS = ["The history of the lighthouse begins", "def fibonacci(n):\n    ", "Ten facts about owls:\n1."]


def greedy(n: int) -> SamplingOptions:
    return SamplingOptions(max_tokens=n, temperature=0.0, repeat_penalty=1.0, ignore_eos=True)


@pytest.fixture
def parallel(bundled_model):
    made: list[Session] = []

    def make(n: int, **kw) -> Session:
        options = LoadOptions(model_path=str(bundled_model), n_ctx=CTX, n_threads=1, n_parallel=n, **kw)
        made.append(Session(Runtime(options, extra_bufts=False), None))
        return made[-1]

    yield make
    for s in made:
        s.close()


class Request:
    def __init__(self, session: Session, prompt: str, sampling: SamplingOptions, make_speculator=None):
        self.events: list[dict] = []
        self.cancelled = threading.Event()
        session.slots.start(prompt, None, sampling, self.events.append, self.cancelled, True,
                            make_speculator=make_speculator)

    @property
    def done(self) -> dict | None:
        return next((e for e in self.events if e["ev"] == DONE), None)


def run_until_idle(session: Session) -> None:
    while session.slots.running:
        session.slots.step()


def logits_from_cache(decoder) -> np.ndarray:
    """Decode the last cached token again on top of the others: what the sequence's cache means to the model."""
    last = decoder.tokens[-1]
    decoder.truncate(len(decoder.tokens) - 1)
    decoder.eval_tokens([last])
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(decoder.rt.ctx, -1),
                                 shape=(decoder.rt.n_vocab,)).copy()


def test_answers_are_decoded_together_and_each_slot_caches_only_its_own_tokens(parallel):
    s = parallel(3)
    lengths = (40, 30, 20)
    requests = [Request(s, prompt, greedy(n)) for prompt, n in zip(PROMPTS, lengths)]
    run_until_idle(s)

    dones = [r.done for r in requests]
    assert [d["completion_tokens"] for d in dones] == list(lengths)
    assert sorted(d["slot"] for d in dones) == [0, 1, 2]
    # An answer of n tokens takes n-1 decodes (its first token comes from the prompt's logits); while all
    # three ran, each decode carried three answers: 19 of them, then two answers for 10, then one for 10.
    assert [d["batch_rows"] for d in dones] == [round((19 * 3 + 10 * 2 + 10) / 39, 2),
                                                round((19 * 3 + 10 * 2) / 29, 2), 3.0]
    for slot in s.slots.slots:
        assert_cache_consistent(slot.decoder)
        # Decoded in shared batches, the cache still means this sequence's tokens and nobody else's.
        cos = cosine(logits_from_cache(slot.decoder), fresh_logits(s.rt.options, slot.decoder.tokens))
        assert cos > KERNEL_COS, (slot.decoder.seq, cos)


def test_a_follow_up_takes_the_slot_that_holds_its_conversation(parallel):
    s = parallel(2)
    first, other = Request(s, PROMPTS[0], greedy(12)), Request(s, PROMPTS[1], greedy(12))
    run_until_idle(s)
    a = first.done
    # The client sends the whole transcript again with a new part; the other conversation ended later,
    # so the least recently used slot is not this one: the cached start decides.
    follow_up = Request(s, PROMPTS[0] + a["text"] + "\n\nThe keeper's diary says", greedy(5))
    run_until_idle(s)
    b = follow_up.done
    assert b["slot"] == a["slot"] != other.done["slot"]
    # The cache held the prompt and every answer token but the last (never decoded): only the rest is evaluated.
    assert b["prompt_evaluated"] == b["prompt_tokens"] - (a["prompt_tokens"] + a["completion_tokens"] - 1)
    assert b["prompt_evaluated"] < 12


def test_cancelling_one_answer_leaves_the_others_running(parallel):
    s = parallel(2)
    stopped, going = Request(s, PROMPTS[0], greedy(30)), Request(s, PROMPTS[1], greedy(30))
    for _ in range(5):
        s.slots.step()
    stopped.cancelled.set()
    run_until_idle(s)
    assert stopped.done["finish_reason"] == "cancelled"
    assert stopped.done["completion_tokens"] == 7  # the first from the prompt, five steps, one more noticed it
    assert going.done["finish_reason"] == "length" and going.done["completion_tokens"] == 30
    for slot in s.slots.slots:
        assert_cache_consistent(slot.decoder)


def test_each_slot_drafts_its_own_prediction_in_the_shared_batch(parallel):
    """Two answers with predictions (their plain answers, one with a line left out) and one without, decoded
    together: drafts ride in the shared batch, each slot keeps what its target confirms, and every cache holds
    exactly its own answer."""
    s = parallel(3)
    n = 40
    plain = [Request(s, prompt, greedy(n)) for prompt in PROMPTS]
    run_until_idle(s)
    s.reset()
    texts = [r.done["text"] for r in plain]
    edited = texts[1].split("\n")
    predictions = [texts[0], "\n".join(edited[:1] + edited[2:]) if len(edited) > 2 else texts[1][5:]]
    requests = [Request(s, prompt, greedy(n), lambda dec, text=text: predicted(dec, text))
                for prompt, text in zip(PROMPTS, predictions)] + [Request(s, PROMPTS[2], greedy(n))]
    run_until_idle(s)
    dones = [r.done for r in requests]
    assert [d["completion_tokens"] for d in dones] == [n] * 3
    for done in dones[:2]:
        assert done["spec"]["drafter"] == "prediction" and done["spec"]["drafted"] > 0
        assert done["spec"]["tokens_per_step"] > 1.5
        assert done["prediction"]["accepted"] > n // 2
    assert "spec" not in dones[2]
    for slot in s.slots.slots:
        assert_cache_consistent(slot.decoder)


def test_prompt_lookup_serves_every_slot(bundled_model):
    session = Session.load(LoadOptions(model_path=str(bundled_model), n_ctx=CTX, n_threads=1, n_parallel=2,
                                       lookup=True, extra_bufts=False))
    try:
        events: list[dict] = []
        for prompt in PROMPTS[:2]:  # through the session, as the engine host starts answers
            assert session.complete(prompt, greedy(12), events.append, threading.Event()) is None
        run_until_idle(session)
        dones = [e for e in events if e["ev"] == DONE]
        assert len(dones) == 2 and {d["spec"]["drafter"] for d in dones} == {"lookup"}
        assert all(d["completion_tokens"] == 12 for d in dones)
    finally:
        session.close()


def test_each_slot_slides_its_own_window(parallel):
    s = parallel(2)
    # One answer runs past its slot's context several times; the other stays inside it.
    long, short = Request(s, PROMPTS[0], greedy(600)), Request(s, PROMPTS[1], greedy(100))
    run_until_idle(s)
    assert long.done["completion_tokens"] == 600 and long.done["finish_reason"] == "length"
    assert long.done["window"]["shifts"] >= 2
    assert short.done["window"]["shifts"] == 0 and short.done["completion_tokens"] == 100
    for slot in s.slots.slots:
        assert len(slot.decoder.tokens) <= CTX
        assert_cache_consistent(slot.decoder)


def test_the_engine_serves_more_requests_than_slots_and_loads_after_them(bundled_model):
    client = EngineClient()
    try:
        info = client.load(LoadOptions(model_path=str(bundled_model), n_ctx=CTX, n_parallel=2))
        assert info["n_parallel"] == 2 and info["n_ctx"] == CTX
        results: dict[int, dict] = {}

        def ask(i: int) -> None:
            for event in client.complete(PROMPTS[i], greedy(24)):
                if isinstance(event, (P.Done, P.Failed)):
                    results[i] = event

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(isinstance(results[i], P.Done) for i in range(3)), results
        assert all(results[i]["completion_tokens"] == 24 for i in range(3))
        # Two ran side by side from the start; the third waited for a free slot.
        assert sorted(results[i]["batch_rows"] > 1.0 for i in range(3)) == [False, True, True] or \
            all(results[i]["batch_rows"] > 1.0 for i in range(3))
        # A load waits for running answers instead of pulling the model from under them.
        got: list = []
        started = threading.Event()

        def long_answer() -> None:
            for event in client.complete(PROMPTS[2], greedy(60)):
                started.set()
                if isinstance(event, (P.Done, P.Failed)):
                    got.append(event)

        t = threading.Thread(target=long_answer)
        t.start()
        assert started.wait(60)
        client.load(LoadOptions(model_path=str(bundled_model), n_ctx=CTX))
        t.join(60)
        assert isinstance(got[0], P.Done) and got[0]["completion_tokens"] == 60
    finally:
        client.close()
