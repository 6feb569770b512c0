"""The watchdog over an engine step, against a real `hearth serve`: a step that never ends (the engine stopped
mid-answer with SIGSTOP, as a grammar llama.cpp cannot follow used to hold it) is ended within the budget that
--step-timeout sets, the request is told why with a status the official SDKs do not retry, /health says so
meanwhile, and the restarted engine answers; on --parallel 2 a request that only waited behind the stalled step is
answered, not failed (issue 56). The grammars that wedged llama.cpp are refused with a 400 before any runs."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import psutil
import pytest

from tests.server.conftest import start_server, stop_server

pytestmark = pytest.mark.slow

BUDGET_S = 3
# What the converter writes for the pattern ^(a|a?){30}{30}$: 900 copies of a choice that can also match nothing.
# llama.cpp spent minutes on its first token (issue 48).
WEDGE = ('root ::= "\\"" r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 r2 '
         '"\\""\nr1 ::= ("a" | "a"?)\nr2 ::= ' + " ".join(["r1"] * 30))
ASK = [{"role": "user", "content": "Say hi"}]
LONG = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 3000, "ignore_eos": True}


def engine_pid(proc) -> int:
    children = psutil.Process(proc.pid).children()
    assert len(children) == 1, children
    return children[0].pid


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("watchdog_home")
    proc, base = start_server("--step-timeout", str(BUDGET_S), env={"HEARTH_HOME": str(home)})
    yield proc, base
    assert stop_server(proc), "hearth serve did not stop on SIGTERM"


def stop_engine_soon(proc, base: str) -> int:
    """Stop the engine mid-answer (SIGSTOP: its step never ends) once it generates; its pid."""
    deadline = time.monotonic() + 30
    while not httpx.get(base.removesuffix("/v1") + "/health", timeout=10).json().get("busy"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    pid = engine_pid(proc)
    os.kill(pid, signal.SIGSTOP)
    return pid


def wait_answered(http: httpx.Client) -> httpx.Response:
    """A plain request, asked until the restarted engine answers it."""
    deadline = time.monotonic() + 60
    while True:
        plain = http.post("/chat/completions", json={"messages": ASK, "max_tokens": 3, "temperature": 0})
        if plain.status_code != 503 or time.monotonic() > deadline:
            return plain
        time.sleep(0.3)


def test_a_wedged_step_is_ended_the_request_told_why_and_the_next_one_answered(server):
    from openai import OpenAI, UnprocessableEntityError

    proc, base = server
    http = httpx.Client(base_url=base, timeout=120)
    health: list[httpx.Response] = []
    asked: list = []

    def ask_long() -> None:  # the official client, with its retries on: it must not ask again
        sdk = OpenAI(base_url=base, api_key="none", max_retries=2, timeout=120)
        try:
            asked.append(sdk.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=LONG["messages"],
                                                     max_tokens=LONG["max_tokens"], extra_body={"ignore_eos": True}))
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            asked.append(exc)

    def watch_health() -> None:  # what a load balancer sees while the engine is stuck
        while not done.is_set():
            health.append(httpx.get(base.removesuffix("/v1") + "/health", timeout=10))
            time.sleep(0.3)

    done = threading.Event()
    asking = threading.Thread(target=ask_long)
    asking.start()
    before = stop_engine_soon(proc, base)
    started = time.monotonic()
    watcher = threading.Thread(target=watch_health)
    watcher.start()
    try:
        asking.join(120)
    finally:
        done.set()
        watcher.join()
    took = time.monotonic() - started
    (error,) = asked
    assert isinstance(error, UnprocessableEntityError), error  # a 503 the SDK retried, wedging the engine again
    message = error.body["message"]
    assert message.startswith("Hearth's watchdog stopped the engine") and f"more than {BUDGET_S} s" in message
    assert error.response.headers.get("x-should-retry") == "false"
    assert took < BUDGET_S + 8, took
    stalled = [r for r in health if r.status_code == 503]
    assert stalled and "step" in stalled[0].json()["error"]["message"], [r.text for r in health]

    # The engine was restarted on the same model: a plain request is answered, by another process.
    plain = wait_answered(http)
    assert plain.status_code == 200, plain.text
    assert plain.json()["choices"][0]["message"]["content"]
    assert engine_pid(proc) != before
    assert httpx.get(base.removesuffix("/v1") + "/health").json()["status"] == "ok"


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
def test_a_request_that_waited_behind_a_stalled_step_is_answered_not_failed(tmp_path):
    """--parallel 2: a plain request sent into the free slot while the other slot's step stalled waited 230 s and
    was failed with it."""
    proc, base = start_server("--step-timeout", str(BUDGET_S), "--parallel", "2", env={"HEARTH_HOME": str(tmp_path)})
    try:
        results: dict = {}

        def ask(name: str, body: dict) -> None:
            started = time.monotonic()
            r = httpx.post(base + "/chat/completions", json=body, timeout=120)
            results[name] = (r, time.monotonic() - started)

        stalls = threading.Thread(target=ask, args=("grammar", {**LONG, "grammar": 'root ::= [a-z ]*'}))
        stalls.start()
        stop_engine_soon(proc, base)
        time.sleep(1.0)
        plain = threading.Thread(target=ask, args=("plain", {"messages": ASK, "max_tokens": 3}))
        plain.start()
        stalls.join(120)
        plain.join(120)
        failed, _ = results["grammar"]
        assert failed.status_code == 422 and failed.json()["error"]["code"] == "engine_step_timeout", failed.text
        answered, took = results["plain"]
        assert answered.status_code == 200 and answered.json()["choices"][0]["message"]["content"], answered.text
        assert took < BUDGET_S + 30, took
    finally:
        stop_server(proc)


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
def test_a_plain_answer_under_way_beside_the_stalled_step_is_answered_not_failed(tmp_path):
    """--parallel 2: a plain (not streamed) answer already under way in one slot when the other slot's step stalled
    was failed with the stall's 422 and told not to retry, though it could not have stalled the engine (it has no
    grammar) and none of its answer had reached its client: it is sent again once the engine is back."""
    proc, base = start_server("--step-timeout", str(BUDGET_S), "--parallel", "2", env={"HEARTH_HOME": str(tmp_path)})
    try:
        results: dict = {}

        def ask(name: str, body: dict) -> None:
            results[name] = httpx.post(base + "/chat/completions", json=body, timeout=120)

        under_way = threading.Thread(target=ask, args=("plain", {**LONG, "max_tokens": 200}))
        under_way.start()
        deadline = time.monotonic() + 30
        while not httpx.get(base.removesuffix("/v1") + "/health", timeout=10).json().get("busy"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)  # its answer has begun (its 200 tokens take seconds on --parallel 2 here)
        stalls = threading.Thread(target=ask, args=("grammar", {**LONG, "grammar": 'root ::= [a-z ]*'}))
        stalls.start()
        time.sleep(0.3)
        os.kill(engine_pid(proc), signal.SIGSTOP)
        stalls.join(120)
        under_way.join(120)
        failed = results["grammar"]
        assert failed.status_code == 422 and failed.json()["error"]["code"] == "engine_step_timeout", failed.text
        answered = results["plain"]
        assert answered.status_code == 200, answered.text
        assert answered.json()["usage"]["completion_tokens"] == 200  # the whole answer, once, from its start
    finally:
        stop_server(proc)


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
def test_a_streamed_answer_under_way_beside_the_stalled_step_goes_on(tmp_path):
    """--parallel 2, as above, with the answer under way streamed: part of it has reached its client, so it cannot be
    sent again from its start; it was failed with the stall's error. It goes on from the text its client has, and the
    client reads one answer to its end (the official client, as an app would)."""
    from openai import OpenAI

    proc, base = start_server("--step-timeout", str(BUDGET_S), "--parallel", "2", env={"HEARTH_HOME": str(tmp_path)})
    try:
        results: dict = {}
        client = OpenAI(base_url=base, api_key="none", max_retries=0, timeout=120)
        model = httpx.get(base + "/models", timeout=30).json()["data"][0]["id"]

        def stream() -> None:
            pieces, finish, usage = [], None, None
            try:
                for chunk in client.chat.completions.create(messages=LONG["messages"], model=model, max_tokens=200,
                                                            stream=True, stream_options={"include_usage": True},
                                                            extra_body={"ignore_eos": True}):
                    if chunk.choices:
                        pieces.append(chunk.choices[0].delta.content or "")
                        finish = chunk.choices[0].finish_reason or finish
                    usage = chunk.usage or usage
                results["stream"] = ("".join(pieces), finish, usage)
            except Exception as exc:  # noqa: BLE001 (what the client raised is the finding)
                results["stream"] = exc

        def stall() -> None:
            results["grammar"] = httpx.post(base + "/chat/completions", json={**LONG, "grammar": 'root ::= [a-z ]*'},
                                            timeout=120)

        under_way = threading.Thread(target=stream)
        under_way.start()
        deadline = time.monotonic() + 30
        while not httpx.get(base.removesuffix("/v1") + "/health", timeout=10).json().get("busy"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)  # its first tokens have gone out
        stalls = threading.Thread(target=stall)
        stalls.start()
        time.sleep(0.3)
        os.kill(engine_pid(proc), signal.SIGSTOP)
        stalls.join(120)
        under_way.join(120)
        assert results["grammar"].status_code == 422, results["grammar"].text
        got = results["stream"]
        assert not isinstance(got, Exception), repr(got)
        text, finish, usage = got
        assert finish == "length" and text.strip()
        assert 200 <= usage.completion_tokens <= 220, usage  # the whole answer (a few past: see _going_on)
    finally:
        stop_server(proc)


@pytest.mark.parametrize("grammar", [
    WEDGE,
    "root ::= " + " ".join(["x"] * 300) + '\nx ::= "a" | "a"?',  # issue 56: raw GBNF, side by side
])
def test_a_grammar_llama_cpp_cannot_follow_is_a_400_before_any_runs(server, grammar):
    proc, base = server
    http = httpx.Client(base_url=base, timeout=120)
    wait_answered(http)  # after the test above, the engine is back
    pid = engine_pid(proc)
    started = time.monotonic()
    r = http.post("/chat/completions", json={"messages": ASK, "max_tokens": 3, "grammar": grammar})
    assert time.monotonic() - started < 2
    assert r.status_code == 400 and r.json()["error"]["param"] == "grammar", r.text
    assert "ways at once" in r.json()["error"]["message"]
    assert engine_pid(proc) == pid  # nothing reached the engine


EXPLODING = {"type": "string", "pattern": "^(a|a?){30}{30}$"}


@pytest.mark.parametrize("path, body, field, pattern", [
    ("/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": EXPLODING}}},
     "response_format.json_schema.schema", EXPLODING["pattern"]),
    ("/chat/completions", {"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"code": EXPLODING}}}}], "tool_choice": "required"},
     "tools", EXPLODING["pattern"]),
    ("/messages", {"output_config": {"format": {"type": "json_schema", "schema": EXPLODING}}},
     "output_config.format.schema", EXPLODING["pattern"]),
    # Issue 56: each part counted alone, side by side they passed and wedged the engine for 63-232 s.
    ("/chat/completions", {}, "response_format.json_schema.schema", "^" + "a?" * 900 + "$"),
    ("/chat/completions", {}, "response_format.json_schema.schema", "^" + "(a|a?){16}" * 56 + "$"),
])
def test_an_exploding_pattern_is_a_400_before_any_grammar_is_built(server, path, body, field, pattern):
    proc, base = server
    wait_answered(httpx.Client(base_url=base, timeout=120))
    pid = engine_pid(proc)
    schema = {"type": "string", "pattern": pattern}
    body = body or {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    started = time.monotonic()
    r = httpx.post(base + path, json={"model": "x", "messages": ASK, "max_tokens": 3, **body}, timeout=30)
    assert time.monotonic() - started < 2
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert field in message and "pattern" in message and "ways at once" in message, message
    assert engine_pid(proc) == pid  # nothing reached the engine
