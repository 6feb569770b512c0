"""A real `hearth serve` on 127.0.0.1 with the bundled model, for the API tests.

Most API test modules share one server (`api`), started on first use: starting one costs seconds of the
suite's budget. A module that needs its own options (or a fresh engine) starts one with start_server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile

import pytest

KEY = "sk-hearth-test"
CTX = 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(*args: str, env: dict | None = None, ctx: int = CTX, session: bool = False) -> tuple[subprocess.Popen, str]:
    """session: in a process group of its own (with its engine), as a terminal or a service manager starts it.
    The server's stderr is in the file proc.log_path."""
    port = free_port()
    # The library the server offers (GET /v1/models) must not include other apps' models on this machine.
    quiet = {"HEARTH_NO_DISCOVERY": "1"}
    # Its stderr goes to a file: a pipe nobody reads fills up, and then the server blocks on its next log line.
    log = tempfile.NamedTemporaryFile(prefix="hearth-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(port), "--threads", "1",
                             "--ctx", str(ctx), *args], stdout=subprocess.PIPE, stderr=log, text=True,
                            env={**os.environ, **quiet, **(env or {})}, start_new_session=session)
    log.close()
    proc.log_path = log.name
    line = proc.stdout.readline()  # the one line, printed once the model is loaded and the socket listens
    if "serves" not in line:
        proc.kill()
        proc.wait()
        raise AssertionError(f"hearth serve did not start: {line!r} {open(log.name).read()}")
    return proc, f"http://127.0.0.1:{port}/v1"


def stop_server(proc: subprocess.Popen) -> bool:
    """Stop a server process; whether SIGTERM was enough (else it is killed)."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


@pytest.fixture(scope="session")
def api(tmp_path_factory):
    """The shared server's base URL (…/v1); it wants KEY."""
    home = tmp_path_factory.mktemp("api_home")
    proc, base = start_server("--api-key", KEY, env={"HEARTH_HOME": str(home)})
    yield base
    assert stop_server(proc), "hearth serve did not stop on SIGTERM"


@pytest.fixture
def oai(api):
    """The official OpenAI client on the shared server."""
    from openai import OpenAI

    return OpenAI(base_url=api, api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def model_name(api) -> str:
    return "SmolLM2-135M-Instruct.Q4_1"
