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
        # (OpenAI's and Anthropic's fixed names, gpt-4o and claude-..., are the loaded model's: #54.4,
        # tests/server/edge/test_client_fields.py.)
        for name in ("no-such-model", str(outside), outside.name, "../" + OTHER):
            r = ask(http, name)
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", name
        r = http.post("/messages", json={"model": "no-such-model", "max_tokens": 2, "messages": ASK})
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
def test_an_idle_model_is_unloaded_after_the_ttl_and_comes_back_when_asked_for(server):
    base, _ = server
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
        assert ask(http, OTHER).status_code == 200
        deadline = time.monotonic() + TTL_S + 15
        while any(listing(http).values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(listing(http).values()), "the idle model was not unloaded"
        health = http.get(base.removesuffix("/v1") + "/health").json()
        assert health["status"] == "ok" and health["model"] is None
        r = ask(http, None)  # none loaded: the model the server started with comes back
        assert r.status_code == 200 and r.json()["model"] == BUNDLED


def test_names_differing_only_in_case_get_their_own_ids_and_a_loose_name_is_refused(tmp_path, model_variant):
    """The library's ids reach the API: two files whose stems differ only in case are two ids in /v1/models,
    each answers to its own, and the shared stem ignoring case is a 400 that lists both, never a guess."""
    home = tmp_path / "home"
    (home / "data" / "models" / "acme__Tiny").mkdir(parents=True)
    shutil.copy(model_variant("Q8_0"), home / "data" / "models" / "tiny-Q8_0.gguf")
    shutil.copy(model_variant("Q4_0"), home / "data" / "models" / "acme__Tiny" / "tiny-q8_0.gguf")
    proc, base = start_server("--api-key", KEY, env={"HEARTH_HOME": str(home)})
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
            ids = list(listing(http))
            assert len(ids) == len({i.casefold() for i in ids}) == 3, ids
            tiny = sorted(i for i in ids if i.casefold().startswith("tiny-q8_0"))
            assert len(tiny) == 2 and all("@" in i for i in tiny)
            for model_id in tiny:
                r = ask(http, model_id)
                assert r.status_code == 200 and r.json()["model"] == model_id, r.text
            r = ask(http, "TINY-Q8_0")
            assert r.status_code == 400 and r.json()["error"]["code"] == "model_ambiguous"
            assert all(i in r.json()["error"]["message"] for i in tiny)
            assert str(home) not in r.json()["error"]["message"]  # a client learns no file paths
            r = ask(http, "tiny-Q8_0.gguf")  # an exact file name wins over the looser match
            assert r.status_code == 200 and r.json()["model"] == next(i for i in tiny if "Q8_0" in i)
    finally:
        stop_server(proc)
