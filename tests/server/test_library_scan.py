"""`hearth serve` answers before, and whatever, its model library's scan: a FIFO named *.gguf in a scanned
folder hung the scan, and the server, which listed the library before it answered anything, opened its
socket but never answered (issue 48). Now only regular files are opened (app/core/gguf/modelfile.py), the
start line and /health come before any listing, and a request for the loaded model never waits for one."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import free_port, stop_server
from tests.helpers.paths import FAULT_SITE

pytestmark = pytest.mark.slow

SCAN_DELAY_S = 30  # a library that takes this long to list (a huge folder, a stuck network share)


def serve(home: Path, extra_env: dict[str, str]) -> tuple[subprocess.Popen, str, float]:
    """A started `hearth serve`, its base URL and how long its start line took; fails (never hangs) when no
    start line comes."""
    port = free_port()
    env = {**os.environ, "HEARTH_HOME": str(home), **extra_env}
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(port), "--threads", "1",
                             "--ctx", "512"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    started = time.monotonic()
    ready, _, _ = select.select([proc.stdout], [], [], 90)
    line = proc.stdout.readline().decode() if ready else ""
    if "serves" not in line:
        proc.kill()
        proc.wait()
        pytest.fail(f"hearth serve did not start within 90 s: {line!r}")
    return proc, f"http://127.0.0.1:{port}", time.monotonic() - started


@pytest.fixture
def home_with_fifos(tmp_path):
    home = tmp_path / "home"
    models = home / "data" / "models"
    models.mkdir(parents=True)
    os.mkfifo(models / "blocker.gguf")  # nothing ever writes to it: a plain open() waits for ever
    elsewhere = tmp_path / "discovery" / ".lmstudio" / "models" / "someone"
    elsewhere.mkdir(parents=True)
    os.mkfifo(elsewhere / "pipe.gguf")
    return home, tmp_path / "discovery"


def test_serve_with_a_fifo_in_its_library_starts_and_lists_without_it(home_with_fifos):
    home, discovery = home_with_fifos
    proc, base, _ = serve(home, {"HEARTH_DISCOVERY_HOME": str(discovery), "HEARTH_NO_DISCOVERY": "0"})
    try:
        assert httpx.get(base + "/health", timeout=10).json()["status"] == "ok"
        ids = [m["id"] for m in httpx.get(base + "/v1/models", timeout=30).json()["data"]]
        assert ids and not any("blocker" in i or "pipe" in i for i in ids), ids
    finally:
        stop_server(proc)


def test_health_and_the_loaded_model_answer_while_the_library_is_still_being_listed(tmp_path):
    path = os.pathsep.join(p for p in (str(FAULT_SITE), os.environ.get("PYTHONPATH", "")) if p)
    proc, base, took = serve(tmp_path, {"PYTHONPATH": path, "HEARTH_TEST_SCAN_DELAY_S": str(SCAN_DELAY_S),
                                        "HEARTH_NO_DISCOVERY": "1"})
    try:
        assert took < SCAN_DELAY_S  # the start line never waits for the listing
        started = time.monotonic()
        assert httpx.get(base + "/health", timeout=10).json()["status"] == "ok"
        plain = httpx.post(base + "/v1/chat/completions", timeout=SCAN_DELAY_S,
                           json={"model": "SmolLM2-135M-Instruct.Q4_1", "max_tokens": 3,
                                 "messages": [{"role": "user", "content": "Hi"}]})
        assert plain.status_code == 200, plain.text
        assert time.monotonic() - started < SCAN_DELAY_S / 2
    finally:
        stop_server(proc)
