"""A request whose client is gone, or no longer reads, gives its slot back, against a real `hearth serve`
with one slot: the request that comes next is answered promptly (issue 48: 42 s and more than 300 s before).

- A client waiting for a whole answer that closes its socket: the generation stops within a token
  (app/server/edge/streams.py polls the disconnect while the tokens come).
- A streaming client that stops reading with its socket open: dropped once it has taken nothing for
  --send-timeout, and its generation stopped (app/server/edge/limits.py's send deadline)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from tests.server.conftest import start_server, stop_server

pytestmark = pytest.mark.slow

SEND_TIMEOUT_S = 2
LONG = {"messages": [{"role": "user", "content": "Write a long story about a lighthouse."}], "max_tokens": 3000,
        "ignore_eos": True}
PLAIN = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("abandoned_home")
    proc, base = start_server("--send-timeout", str(SEND_TIMEOUT_S), env={"HEARTH_HOME": str(home)})
    yield base
    assert stop_server(proc), "hearth serve did not stop on SIGTERM"


def raw_request(base: str, body: dict, rcvbuf: int | None = None) -> socket.socket:
    """A POST sent on a raw socket, its answer left unread."""
    host, port = base.removeprefix("http://").split("/")[0].split(":")
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # the smallest the kernel takes
    sock.connect((host, int(port)))
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return sock


def timed_plain(base: str) -> tuple[int, float]:
    started = time.monotonic()
    r = httpx.post(base + "/chat/completions", json=PLAIN, timeout=120)
    return r.status_code, time.monotonic() - started


def generating(base: str) -> bool:
    return httpx.get(base.removesuffix("/v1") + "/health", timeout=10).json()["busy"]


def test_a_whole_answer_whose_client_left_stops_generating(server):
    sock = raw_request(server, LONG)
    time.sleep(1.0)
    assert generating(server)
    sock.close()
    status, took = timed_plain(server)
    assert status == 200
    # 3000 tokens take tens of seconds here; a token and the plain answer, well under that on a loaded machine.
    assert took < 8, took


def test_a_stream_whose_client_stopped_reading_is_dropped_after_the_send_timeout(server):
    sock = raw_request(server, {**LONG, "stream": True, "max_tokens": 100000}, rcvbuf=1024)
    try:
        time.sleep(1.0)
        assert generating(server)
        status, took = timed_plain(server)  # waits for the only slot
        assert status == 200
        assert took < SEND_TIMEOUT_S + 10, took
        # The stalled client's connection was cut: what it still reads ends (a reset, or the end of the stream).
        sock.settimeout(10)
        assert read_to_end(sock)
    finally:
        sock.close()


def read_to_end(sock: socket.socket) -> bool:
    """True once the connection has ended; a socket still open after its timeout raises TimeoutError."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_a_client_that_reads_its_stream_is_never_dropped(server):
    """Longer than the send timeout, read in bursts with pauses shorter than it: every token arrives."""
    from openai import OpenAI

    client = OpenAI(base_url=server, api_key="none", max_retries=0, timeout=120)
    started, finish, pieces = time.monotonic(), None, 0
    answer = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=LONG["messages"], stream=True,
                                            max_tokens=300, extra_body={"ignore_eos": True})
    for chunk in answer:
        pieces += 1
        if pieces % 50 == 0:
            time.sleep(SEND_TIMEOUT_S / 2)
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "length"
    assert time.monotonic() - started > SEND_TIMEOUT_S
