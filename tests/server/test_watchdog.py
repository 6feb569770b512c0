"""The watchdog over an engine step, against a real `hearth serve`: a grammar that really wedges llama.cpp
(given directly as GBNF, which the pattern bound of app/protocol/schema_size.py does not see) is ended within
its step budget, the request is told why, /health says so meanwhile, and the restarted engine answers."""

from __future__ import annotations

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


def test_a_wedged_step_is_ended_the_request_told_why_and_the_next_one_answered(server):
    proc, base = server
    http = httpx.Client(base_url=base, timeout=120)
    before = engine_pid(proc)
    health: list[httpx.Response] = []

    def watch_health() -> None:  # what a load balancer sees while the engine is stuck
        while not done.is_set():
            health.append(httpx.get(base.removesuffix("/v1") + "/health", timeout=10))
            time.sleep(0.3)

    done = threading.Event()
    watcher = threading.Thread(target=watch_health)
    watcher.start()
    started = time.monotonic()
    try:
        wedged = http.post("/chat/completions", json={"messages": ASK, "max_tokens": 3, "grammar": WEDGE})
    finally:
        done.set()
        watcher.join()
    took = time.monotonic() - started
    assert wedged.status_code == 503, wedged.text
    message = wedged.json()["error"]["message"]
    assert "watchdog" in message and f"more than {BUDGET_S} s" in message, message
    assert took < BUDGET_S + 8, took
    stalled = [r for r in health if r.status_code == 503]
    assert stalled and "step" in stalled[0].json()["error"]["message"], [r.text for r in health]
    assert all(r.json().get("status") != "ok" for r in health[-1:]), health[-1].text

    # The engine was restarted on the same model: a plain request is answered, by another process.
    deadline = time.monotonic() + 60
    while True:
        plain = http.post("/chat/completions", json={"messages": ASK, "max_tokens": 3, "temperature": 0})
        if plain.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert plain.status_code == 200, plain.text
    assert plain.json()["choices"][0]["message"]["content"]
    assert engine_pid(proc) != before
    assert httpx.get(base.removesuffix("/v1") + "/health").json()["status"] == "ok"


EXPLODING = {"type": "string", "pattern": "^(a|a?){30}{30}$"}


@pytest.mark.parametrize("path, body, field", [
    ("/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": EXPLODING}}},
     "response_format.json_schema.schema"),
    ("/chat/completions", {"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"code": EXPLODING}}}}], "tool_choice": "required"},
     "tools"),
    ("/messages", {"output_config": {"format": {"type": "json_schema", "schema": EXPLODING}}},
     "output_config.format.schema"),
])
def test_an_exploding_pattern_is_a_400_before_any_grammar_is_built(server, path, body, field):
    proc, base = server
    pid = engine_pid(proc)
    started = time.monotonic()
    r = httpx.post(base + path, json={"model": "x", "messages": ASK, "max_tokens": 3, **body}, timeout=30)
    assert time.monotonic() - started < 2
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert field in message and "pattern" in message and "900 times" in message, message
    assert engine_pid(proc) == pid  # nothing reached the engine
