"""Settings that would expose the model without a word (issue 48): a blank API key, which no client can send,
is refused in one sentence before anything loads, whether given with --api-key or HEARTH_API_KEY; --cors '*'
without a key warns that any web page can use the model, as binding beyond loopback without one is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.server.conftest import KEY, free_port, start_server, stop_server

pytestmark = pytest.mark.slow


def refused(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "app", "serve", "--port", str(free_port()), *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert time.monotonic() - started < 30
    assert done.returncode != 0 and "serves" not in done.stdout, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("args, env", [
    (["--api-key", " "], {}), (["--api-key", ""], {}), ([], {"HEARTH_API_KEY": "  \t"}),
    (["--host", "0.0.0.0"], {"HEARTH_API_KEY": " "})], ids=["flag", "empty-flag", "env", "env-network"])
def test_a_blank_key_is_refused_in_one_sentence(tmp_path, args, env):
    done = refused(args, {"HEARTH_HOME": str(tmp_path), **env})
    assert "API key is blank" in done.stderr and "HEARTH_API_KEY" in done.stderr, done.stderr


def test_a_key_no_client_can_send_is_refused(tmp_path):
    done = refused(["--api-key", " sk-padded "], {"HEARTH_HOME": str(tmp_path)})
    assert "spaces at its start or end" in done.stderr, done.stderr


def test_cors_any_origin_without_a_key_warns_and_with_one_does_not(tmp_path):
    proc, _ = start_server("--cors", "*", env={"HEARTH_HOME": str(tmp_path / "a")})
    try:
        log = open(proc.log_path).read()
        assert "--cors '*' without an API key lets any web page" in log, log
    finally:
        stop_server(proc)
    proc, _ = start_server("--cors", "*", "--api-key", KEY, env={"HEARTH_HOME": str(tmp_path / "b")})
    try:
        assert "--cors" not in open(proc.log_path).read()
    finally:
        stop_server(proc)
