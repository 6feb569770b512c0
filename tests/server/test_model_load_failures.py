"""Model files that cannot load, against a real `hearth serve`: one a request names is a 4xx naming the file
and why while the working model stays loaded (A6), and the served file truncated under the running server
does not leave every request at "the model is loading" for ever (A7)."""

from __future__ import annotations

import shutil
import time

import httpx
import psutil
import pytest

from tests.server.conftest import start_server, stop_server

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Name a color."}]


def ask(base: str, model: str | None = None) -> httpx.Response:
    body = {"messages": ASK, "max_tokens": 3, "temperature": 0, **({"model": model} if model else {})}
    return httpx.post(base + "/chat/completions", json=body, timeout=120)


def engines(proc) -> list[int]:
    return [c.pid for c in psutil.Process(proc.pid).children()]


def truncated_copy(source, target, keep: float = 0.6) -> None:
    """The model file cut short: its header (at the front) still parses, its tensor data is missing."""
    data = source.read_bytes()
    target.write_bytes(data[: int(len(data) * keep)])


def test_a_requested_model_that_cannot_load_is_a_400_and_the_working_one_stays(tmp_path, bundled_model):
    home = tmp_path / "home"
    (home / "data" / "models").mkdir(parents=True)
    truncated_copy(bundled_model, home / "data" / "models" / "broken.gguf")
    proc, base = start_server(env={"HEARTH_HOME": str(home)})
    try:
        pid = engines(proc)
        r = ask(base, "broken")
        assert 400 <= r.status_code < 500, r.text
        message = r.json()["error"]["message"]
        assert "broken.gguf" in message and "still loaded" in message, message
        # The working model never left: answered at once, by the same engine process.
        started = time.monotonic()
        assert ask(base).status_code == 200
        assert time.monotonic() - started < 10
        assert engines(proc) == pid
    finally:
        stop_server(proc)


def test_a_model_file_truncated_under_the_server_is_tried_again_once_it_is_back(tmp_path, bundled_model):
    served = tmp_path / "served.gguf"
    shutil.copy(bundled_model, served)
    proc, base = start_server("--model", str(served), env={"HEARTH_HOME": str(tmp_path / "home")})
    try:
        assert ask(base).status_code == 200
        truncated_copy(bundled_model, served)  # in place: the engine's mapping loses its pages (SIGBUS)
        statuses = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = ask(base)
            statuses.append((r.status_code, r.json().get("error", {}).get("code")))
            if r.status_code == 503 and r.json()["error"].get("code") == "model_load_failed":
                break
            time.sleep(0.5)
        assert statuses[-1] == (503, "model_load_failed"), statuses
        assert "served.gguf" in r.json()["error"]["message"], r.text
        health = httpx.get(base.removesuffix("/v1") + "/health", timeout=10)
        assert health.status_code == 503 and health.json()["error"]["code"] == "model_load_failed", health.text
        assert "served.gguf could not be loaded" in open(proc.log_path).read()  # serve says why

        shutil.copy(bundled_model, served)  # put back: the next request loads it again
        r = ask(base)
        assert r.status_code == 200, r.text
        assert httpx.get(base.removesuffix("/v1") + "/health").json()["status"] == "ok"
    finally:
        stop_server(proc)
