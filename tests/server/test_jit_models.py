"""Models loaded on demand: a request naming another library model loads it (one at a time by default),
an idle model is unloaded after --ttl, and a name the library does not know is a 404."""

from __future__ import annotations

import shutil
import time

import httpx
import pytest

from tests.server.conftest import KEY, start_server, stop_server

pytestmark = pytest.mark.slow

TTL_S = 6  # long enough that no step of a test outlasts it on a busy machine
BUNDLED = "SmolLM2-135M-Instruct.Q4_1"
OTHER = "smollm2-135m-Q8_0"
ASK = [{"role": "user", "content": "Name a color."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_variant):
    home = tmp_path_factory.mktemp("jit_home")
    (home / "data" / "models").mkdir(parents=True)
    shutil.copy(model_variant("Q8_0"), home / "data" / "models" / f"{OTHER}.gguf")
    outside = tmp_path_factory.mktemp("elsewhere") / "secret.gguf"
    shutil.copy(model_variant("Q8_0"), outside)
    proc, base = start_server("--api-key", KEY, "--ttl", str(TTL_S), env={"HEARTH_HOME": str(home)})
    yield base, outside
    assert stop_server(proc), "hearth serve did not stop on SIGTERM"


def listing(http: httpx.Client) -> dict[str, bool]:
    return {m["id"]: m["meta"]["loaded"] for m in http.get("/models").json()["data"]}


def ask(http: httpx.Client, model: str | None) -> httpx.Response:
    body = {"messages": ASK, "max_tokens": 3, "temperature": 0, **({"model": model} if model else {})}
    return http.post("/chat/completions", json=body, timeout=120)


def test_another_library_model_loads_on_demand_in_place_of_the_first(server):
    base, _ = server
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
        assert listing(http) == {BUNDLED: True, OTHER: False}
        r = ask(http, OTHER)
        assert r.status_code == 200 and r.json()["model"] == OTHER
        assert listing(http) == {OTHER: True, BUNDLED: False}  # --max-models 1: it took the first one's place
        # A request that names no model gets the one used last.
        assert ask(http, None).json()["model"] == OTHER
        r = ask(http, BUNDLED)
        assert r.status_code == 200 and r.json()["model"] == BUNDLED


def test_names_outside_the_library_are_a_404(server):
    base, outside = server
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
        for name in ("gpt-4o", str(outside), outside.name, "../" + OTHER):
            r = ask(http, name)
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", name
        r = http.post("/messages", json={"model": "claude-x", "max_tokens": 2, "messages": ASK})
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_an_idle_model_is_unloaded_after_the_ttl_and_comes_back_when_asked_for(server):
    base, _ = server
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
        assert ask(http, OTHER).status_code == 200
        deadline = time.monotonic() + TTL_S + 15
        while any(listing(http).values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(listing(http).values()), "the idle model was not unloaded"
        health = httpx.get(base.removesuffix("/v1") + "/health").json()
        assert health["status"] == "ok" and health["model"] is None
        r = ask(http, None)  # none loaded: the model the server started with comes back
        assert r.status_code == 200 and r.json()["model"] == BUNDLED
