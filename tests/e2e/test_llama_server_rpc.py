"""Hearth drives llama.cpp's own `llama-server` whose model runs on a `ggml-rpc-server` worker: the
scale-out recipe of the README ("When one machine is not enough"), on loopback.

Opt-in, because the two binaries take 10-15 minutes to build on 2 cores: it runs when
`python scripts/build_llama_server.py` has cached them, or with HEARTH_TEST_LLAMA_SERVER=1, which
builds them first (the same script). Otherwise it is skipped with the command that enables it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from app.protocol import messages as P
from app.backends.client import EngineClient
from app.backends.remote import RemoteEndpoint
from tests.commands.test_cli import hearth
from tests.server.conftest import free_port, stop_server

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_llama_server.py"
PROMPT = "Name three colors."
CTX = 1024
START_TIMEOUT_S = 120


def _build_script():
    spec = importlib.util.spec_from_file_location("build_llama_server", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    script = _build_script()
    found = script.cached_binaries()
    if found is None and os.environ.get("HEARTH_TEST_LLAMA_SERVER") == "1":
        found = script.build(script.cache_root(), None, os.cpu_count() or 2, keep_build=False)
    if found is None:
        pytest.skip(f"llama-server is not built; run `python {SCRIPT.relative_to(SCRIPT.parents[1])}` "
                    "or set HEARTH_TEST_LLAMA_SERVER=1")
    return found


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the RPC worker exited: {log.read_text()[-2000:]}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"the RPC worker did not listen within {START_TIMEOUT_S} s")


@pytest.fixture(scope="module")
def rpc_head(binaries, bundled_model, extra_bufts_work, tmp_path_factory):
    """A ggml-rpc-server worker and a llama-server head that puts every layer on it;
    yields (base URL, the head's log, the worker's address)."""
    logs = tmp_path_factory.mktemp("llama-server")
    rpc_port, http_port = free_port(), free_port()
    worker_log, head_log = logs / "rpc.log", logs / "server.log"
    worker = subprocess.Popen([str(binaries["ggml-rpc-server"]), "--host", "127.0.0.1", "--port", str(rpc_port),
                               "--threads", "1"], stdout=worker_log.open("w"), stderr=subprocess.STDOUT)
    head = None
    try:
        _wait_for_port(rpc_port, worker, worker_log)
        # -ngl 99: every layer goes to the devices, here the one RPC device (the head's CPU keeps the rest).
        head = subprocess.Popen([str(binaries["llama-server"]), "-m", str(bundled_model),
                                 "--rpc", f"127.0.0.1:{rpc_port}", "-ngl", "99", "--host", "127.0.0.1",
                                 "--port", str(http_port), "-c", str(CTX), "--threads", "1", "-np", "1",
                                 "-lv", "4",  # info level: the log names each device's buffers
                                 # where repacked weights crash quantized models (AMX, llama.cpp 20824)
                                 *([] if extra_bufts_work else ["--no-repack"])],
                                stdout=head_log.open("w"), stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{http_port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert head.poll() is None, f"llama-server exited: {head_log.read_text()[-3000:]}"
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"llama-server not ready: {head_log.read_text()[-3000:]}"
            time.sleep(0.3)
        yield base + "/v1", head_log, f"127.0.0.1:{rpc_port}"
    finally:
        if head is not None:
            stop_server(head)
        stop_server(worker)


@pytest.mark.slow
def test_hearth_chats_through_a_llama_server_rpc_head(rpc_head):
    base, head_log, worker = rpc_head
    # The model's layers and KV cache really live on the worker: llama-server reports its buffers there.
    log = head_log.read_text()
    assert f"RPC0[{worker}] model buffer size" in log and f"RPC0[{worker}] KV buffer size" in log

    # The server's own answer, without Hearth: non-streamed, greedy.
    whole = httpx.post(base + "/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": PROMPT}], "temperature": 0, "top_k": 0, "top_p": 1.0,
        "min_p": 0.0, "repeat_penalty": 1.0, "max_tokens": 16}).json()
    expected = whole["choices"][0]["message"]["content"]

    # Hearth's remote backend streams the same answer, with counts from the server's usage chunk.
    greedy = P.SamplingOptions(temperature=0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, max_tokens=16)
    endpoint = RemoteEndpoint(base)
    with EngineClient(endpoint) as remote:
        info = remote.load(P.LoadOptions())
        assert info["remote"] is True and info["n_ctx"] == CTX  # from llama-server's /props
        events = list(remote.chat([{"role": "user", "content": PROMPT}], greedy))
        # The server's own KV figures (its /slots): the slot that answered holds the prompt and the answer.
        figures = endpoint.server_figures()
        assert figures["n_ctx"] == CTX and figures["slots"] == 1 and figures["slots_busy"] == 0
        assert figures["n_past"] > 0
    done = events[-1]
    assert isinstance(done, P.Done) and done["finish_reason"] in ("stop", "length")
    assert "".join(e.text for e in events if isinstance(e, P.Token)) == done["text"] == expected
    assert done["completion_tokens"] == whole["usage"]["completion_tokens"] and done["ttft_s"] > 0

    # `hearth chat --endpoint` as a user runs it: twice, the same greedy answer.
    answers = []
    for _ in range(2):
        proc = hearth("chat", "--endpoint", base, "--json", "--prompt", PROMPT, "--temp", "0",
                      "--max-tokens", "16", timeout=180)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["model_path"] == base and out["gen_tok_s"] > 0 and out["peak_rss_mb"] is None
        answers.append(out["text"])
    assert answers[0] == answers[1] and answers[0]
