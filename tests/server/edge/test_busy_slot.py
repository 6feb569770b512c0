"""The busy slot is released on every path (app/backends/in_flight.py, app/server/edge/streams.py's request_scope),
against a real `hearth serve`: a request that fails at each stage it passes through (its body's parsing,
the command's encoding for the engine, the chat template, tokenizing, generating, the answer's encoding for
the client), streaming or not, leaves the model not busy, and after all of them a request for another model
loads it (a busy model cannot be unloaded to make room: 503 model_busy).

The failures are injected as bugs would happen, by tests/server/fault_site/sitecustomize.py, in the server's
and the engine's own processes."""

from __future__ import annotations

import os
import shutil
import time

import httpx
import pytest

from tests.server.conftest import start_server, stop_server
from tests.helpers.paths import FAULT_SITE

pytestmark = pytest.mark.slow

OTHER = "smollm2-135m-Q8_0"
# Each stage in the order a request meets it, and the status its failure gets (None: after the answer began).
STAGES = {"parse": 500, "send": 400, "template": 500, "tokenize": 500, "generate": 500, "encode": 500}


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_variant):
    home = tmp_path_factory.mktemp("busy_home")
    (home / "data" / "models").mkdir(parents=True)
    shutil.copy(model_variant("Q8_0"), home / "data" / "models" / f"{OTHER}.gguf")
    path = os.pathsep.join(p for p in (str(FAULT_SITE), os.environ.get("PYTHONPATH", "")) if p)
    proc, base = start_server(env={"HEARTH_HOME": str(home), "PYTHONPATH": path})
    yield base
    assert stop_server(proc), "hearth serve did not stop on SIGTERM"


def health(base: str) -> dict:
    return httpx.get(base.removesuffix("/v1") + "/health", timeout=10).json()


def wait_not_busy(base: str, within_s: float = 10.0) -> dict:
    deadline = time.monotonic() + within_s
    while True:
        state = health(base)
        if not state.get("busy") or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def ask(stage: str, stream: bool) -> dict:
    return {"messages": [{"role": "user", "content": f"Count to fifty. FAULT:{stage}"}], "max_tokens": 40,
            "ignore_eos": True, "stream": stream}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_a_failure_at_any_stage_leaves_the_model_not_busy(server, stage, stream):
    with httpx.Client(base_url=server, timeout=60) as http:
        try:
            with http.stream("POST", "/chat/completions", json=ask(stage, stream)) as response:
                status = response.status_code
                body = response.read()
        except httpx.RemoteProtocolError:  # the answer had begun: the connection is cut, which a client sees
            status, body = None, b""
        if status == 200:
            assert stream and stage in ("generate", "encode"), body  # an error after the first token
            assert b"error" in body or not body.endswith(b"[DONE]\n\n"), body
        elif status is not None:
            assert status == STAGES[stage], body
        else:
            assert stream and stage == "encode"
        state = wait_not_busy(server)
        assert state == {"status": "ok", "model": "SmolLM2-135M-Instruct.Q4_1", "busy": False}, (stage, state)
        plain = http.post("/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        assert plain.status_code == 200, plain.text


def test_after_every_failure_another_model_can_take_its_place(server):
    r = httpx.post(server + "/chat/completions", timeout=120,
                   json={"model": OTHER, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == OTHER
