"""No request can take the server down or hold it: the findings of #30 reproduced against a real `hearth serve`.

- a JSON schema whose repetition counts ask for gigabytes of grammar (one took 23 GB until the OOM killer came);
- a chat of 100,000 turns (it held all slots for four minutes: llama.cpp's special-token split is quadratic);
- a web page's "simple" POST (text/plain) and a DNS-rebound Host;
- a body past the size limit;
- connections that never finish their request (slowloris), too many connections, too many waiting requests.

Each is refused with the dialect's error, quickly, without the server's memory growing, and a small request
sent meanwhile is answered.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import psutil
import pytest

from tests.server.conftest import start_server, stop_server

pytestmark = pytest.mark.slow

USER = [{"role": "user", "content": "hi"}]
MODEL = "SmolLM2-135M-Instruct.Q4_1"
HEAD_TIMEOUT = 1
MAX_CONNECTIONS = 8
HUGE = 10**9
# Schemas that ask the converter to write out more grammar than llama.cpp will take, each a different way.
GREEDY_SCHEMAS = {
    "minItems": {"type": "array", "items": {"type": "string"}, "minItems": HUGE},
    "minItems 3e6": {"type": "array", "items": {"type": "string"}, "minItems": 3_000_000},
    "minLength": {"type": "string", "minLength": HUGE},
    "minLength, nested": {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "string", "minLength": 50_000_000}}}}},
    "pattern count": {"type": "string", "pattern": "^x{100000000}$"},
    "float count": {"type": "array", "items": {"type": "string"}, "minItems": 1e300},
    "many medium": {"type": "object", "properties": {f"p{i}": {"type": "array", "items": {"type": "string"},
                                                               "minItems": 2000} for i in range(40)}},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server as a user starts it: loopback, no key (the default), two slots; its time limits and queue are
    short, so that the tests of them take a second (the other tests never come near them)."""
    home = tmp_path_factory.mktemp("bounded_home")
    proc, base = start_server("--parallel", "2", "--head-timeout", str(HEAD_TIMEOUT), "--body-timeout", "1",
                              "--max-connections", str(MAX_CONNECTIONS), "--max-queue", "1",
                              env={"HEARTH_HOME": str(home)})
    yield proc, base
    assert stop_server(proc)


def server_rss_mb(proc) -> float:
    return psutil.Process(proc.pid).memory_info().rss / 2**20


def post(base: str, path: str, body: dict, **headers) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, headers=headers, timeout=60)


@pytest.mark.parametrize("name", list(GREEDY_SCHEMAS))
def test_a_schema_that_would_expand_without_bound_is_a_400_in_milliseconds(server, name):
    proc, base = server
    schema = GREEDY_SCHEMAS[name]
    before = server_rss_mb(proc)
    requests = [
        ("/chat/completions", {"messages": USER, "max_tokens": 4,
                               "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}},
         "response_format.json_schema.schema"),
        ("/chat/completions", {"messages": USER, "max_tokens": 4, "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
                "v": schema}}}}], "tool_choice": "required"}, "tools"),
        ("/messages", {"messages": USER, "max_tokens": 4, "tools": [
            {"name": "f", "input_schema": {"type": "object", "properties": {"v": schema}}}],
                       "tool_choice": {"type": "any"}}, None),
    ]
    for path, body, param in requests:
        started = time.monotonic()
        r = post(base, path, body)
        elapsed = time.monotonic() - started
        assert r.status_code == 400, (path, r.text)
        assert elapsed < 0.5, f"{path} took {elapsed:.2f} s to refuse {name}"
        text = r.json()["error"]["message"]
        # A repetition count in a pattern is caught by the pattern bound first (#48 A1), which says so in its words.
        assert "too big" in text or ("pattern" in text and "cannot enforce in reasonable time" in text), text
        if param:
            assert r.json()["error"]["param"] == param
    assert server_rss_mb(proc) - before < 50
    assert post(base, "/chat/completions", {"messages": USER, "max_tokens": 2}).status_code == 200


def test_ordinary_schemas_with_counts_still_convert(server):
    _, base = server
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
        "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}}, "required": ["tags", "date"]}
    r = post(base, "/chat/completions", {"messages": USER, "max_tokens": 60, "temperature": 0,
                                         "response_format": {"type": "json_schema",
                                                             "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 200, r.text
    if r.json()["choices"][0]["finish_reason"] == "stop":
        answer = json.loads(r.json()["choices"][0]["message"]["content"])
        assert 1 <= len(answer["tags"]) <= 3 and len(answer["date"]) == 10


def test_an_upper_bound_too_large_to_limit_anything_is_left_out_in_every_dialect(server):
    # #54.2: Claude Code's Workflow tool has a string of "maxLength": 524288; a tool list carrying it was a 400.
    proc, base = server
    schema = {"type": "object", "properties": {"script": {"type": "string", "maxLength": HUGE},
                                               "lines": {"type": "array", "items": {"type": "string"},
                                                         "maxItems": HUGE}}}
    before = server_rss_mb(proc)
    tool = {"type": "function", "function": {"name": "run", "parameters": schema}}
    requests = [
        ("/chat/completions", {"messages": USER, "max_tokens": 4, "tools": [tool], "tool_choice": "auto"}),
        ("/chat/completions", {"messages": USER, "max_tokens": 4, "tools": [tool], "tool_choice": "required"}),
        ("/chat/completions", {"messages": USER, "max_tokens": 4, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
        ("/responses", {"input": "hi", "max_output_tokens": 16, "tools": [{"type": "function", "name": "run",
                                                                          "parameters": schema}]}),
        ("/messages", {"messages": USER, "max_tokens": 4, "tools": [{"name": "run", "input_schema": schema}]}),
    ]
    for path, body in requests:
        r = post(base, path, body)
        assert r.status_code == 200, (path, r.text)
    assert server_rss_mb(proc) - before < 50


def test_a_hundred_thousand_turns_are_refused_at_once_and_hold_no_one_up(server):
    proc, base = server
    many = {"messages": USER * 100_000, "max_tokens": 4}  # 2.6 MB, each turn two special tokens
    markers = {"prompt": "<|im_start|>" * 20_000, "max_tokens": 4}
    small_times: list[float] = []

    def small_requests(stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            r = post(base, "/chat/completions", {"messages": USER, "max_tokens": 2})
            assert r.status_code == 200, r.text
            small_times.append(time.monotonic() - started)

    stop = threading.Event()
    beside = threading.Thread(target=small_requests, args=(stop,))
    beside.start()
    try:
        for path, body in (("/chat/completions", many), ("/completions", markers), ("/messages", many)):
            started = time.monotonic()
            r = post(base, path, body)
            elapsed = time.monotonic() - started
            assert r.status_code == 400, r.text
            assert elapsed < 2.0, f"{path} took {elapsed:.2f} s to refuse"
            if path != "/messages":
                assert r.json()["error"]["code"] == "context_length_exceeded"
    finally:
        stop.set()
        beside.join(60)
    assert small_times and max(small_times) < 2.0 + 1.0, small_times  # its own answer takes well under a second
    assert proc.poll() is None


def test_a_web_page_cannot_reach_the_api(server):
    _, base = server
    port = base.split(":")[2].split("/")[0]
    body = json.dumps({"messages": USER, "max_tokens": 2})
    # What a page can send cross-origin without a preflight: text/plain, a form, nothing said.
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": kind} if kind else {}
        r = httpx.post(f"{base}/chat/completions", content=body, headers=headers, timeout=30)
        assert r.status_code == 415, (kind, r.text)
        assert r.json()["error"]["code"] == "unsupported_media_type"
    r = httpx.post(f"{base}/messages", content=body, headers={"Content-Type": "text/plain"}, timeout=30)
    assert r.status_code == 415 and r.json()["type"] == "error"  # in Anthropic's envelope there
    # DNS rebinding: the page's own name, pointed at 127.0.0.1.
    for host in ("attacker.example", f"attacker.example:{port}", "localhost.attacker.example", "127.0.0.1.nip.io"):
        r = post(base, "/chat/completions", {"messages": USER, "max_tokens": 2}, Host=host)
        assert r.status_code == 403, (host, r.text)
        assert r.json()["error"]["code"] == "host_not_allowed"
        assert httpx.get(f"{base}/models", headers={"Host": host}).status_code == 403
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost", "LOCALHOST"):
        assert post(base, "/chat/completions", {"messages": USER, "max_tokens": 2}, Host=host).status_code == 200


def test_a_body_past_the_limit_is_a_413_before_it_is_parsed(server):
    proc, base = server
    before = server_rss_mb(proc)
    big = b'{"messages": [{"role": "user", "content": "' + b"a" * (11 * 2**20) + b'"}]}'
    r = httpx.post(f"{base}/chat/completions", content=big, headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunks():  # no Content-Length: the limit holds for a streamed body too
        for _ in range(12):
            yield b"a" * 2**20

    r = httpx.post(f"{base}/chat/completions", content=chunks(), headers={"Content-Type": "application/json"},
                   timeout=60)
    assert r.status_code == 413
    assert server_rss_mb(proc) - before < 50


def test_health_on_a_server_without_a_key_says_its_model(server):
    _, base = server  # whoever can reach it may use it, so may see what it runs (and a foreign Host is refused)
    health = httpx.get(base.removesuffix("/v1") + "/health", timeout=10).json()
    assert health["status"] == "ok" and health["model"] == "SmolLM2-135M-Instruct.Q4_1" and "busy" in health
    assert httpx.get(base.removesuffix("/v1") + "/health", headers={"Host": "attacker.example"}).status_code == 403


def test_allowed_host_and_a_key_open_other_names(tmp_path):
    proc, base = start_server("--allowed-host", "hearth.lan", "--max-body-mb", "0.5", env={"HEARTH_HOME": str(tmp_path)})
    try:
        assert httpx.get(f"{base}/models", headers={"Host": "hearth.lan:80"}).status_code == 200
        assert httpx.get(f"{base}/models", headers={"Host": "other.lan"}).status_code == 403
        r = post(base, "/chat/completions", {"messages": [{"role": "user", "content": "a" * 600_000}]})
        assert r.status_code == 413 and "(0.5 MB)" in r.json()["error"]["message"]  # the body limit is a flag
    finally:
        stop_server(proc)
    proc, base = start_server("--api-key", "k", env={"HEARTH_HOME": str(tmp_path)})
    try:  # with a key, the key protects the server: any name, but not without the key
        auth = {"Authorization": "Bearer k"}
        assert httpx.get(f"{base}/models", headers={"Host": "gpu-box.lan", **auth}).status_code == 200
        assert httpx.get(f"{base}/models", headers={"Host": "gpu-box.lan"}).status_code == 401
    finally:
        stop_server(proc)


# --- connections that never end, requests that never stop coming -------------------------------------
def connect(base: str) -> socket.socket:
    port = int(base.split(":")[2].split("/")[0])
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def trickle(sock: socket.socket, data: bytes, every_s: float = 0.25, for_s: float = 6.0) -> float:
    """Send data a byte at a time until the server closes the connection; the seconds that took."""
    started = time.monotonic()
    for byte in data:
        if time.monotonic() - started > for_s:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:  # the server closed it
            break
        time.sleep(every_s)
    return time.monotonic() - started


def answer_of(sock: socket.socket) -> bytes:
    """What the server sent before closing the connection (b"" if it only closed it)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return data


SLOW_HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
             b"X-Padding: " + b"x" * 200 + b"\r\n\r\n")


def test_a_slowloris_head_is_a_408_and_closed_after_the_head_timeout(server):
    _, base = server
    with connect(base) as sock:  # a byte every 0.25 s: the head would take a minute
        took = trickle(sock, SLOW_HEAD)
        answer = answer_of(sock)
    assert HEAD_TIMEOUT <= took < HEAD_TIMEOUT + 2, took
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
    with connect(base) as sock:  # a connection that sends nothing is closed too
        started = time.monotonic()
        assert answer_of(sock) == b""
        assert time.monotonic() - started < HEAD_TIMEOUT + 2
    with connect(base) as sock:  # and the next request of a kept-alive connection has the same deadline
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        took = trickle(sock, SLOW_HEAD)
        assert b"HTTP/1.1 408 " in answer_of(sock)
    assert took < HEAD_TIMEOUT + 2, took


def test_a_slow_body_is_a_408(server):
    _, base = server
    body = json.dumps({"messages": USER, "max_tokens": 2}).encode()
    with connect(base) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        took = trickle(sock, body)
        answer = answer_of(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert took < 1 + 2, took


def test_connections_past_the_limit_get_a_503_with_retry_after(server):
    _, base = server
    idle = [connect(base) for _ in range(MAX_CONNECTIONS)]
    try:
        r = httpx.get(f"{base}/models", timeout=10)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"].isdigit() and r.json()["error"]["code"] == "too_many_connections"
        r = post(base, "/messages", {"messages": USER, "max_tokens": 2})
        assert r.status_code == 503 and r.json()["error"]["type"] == "overloaded_error"
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 5  # the server sees the closes in a moment
    while (status := httpx.get(f"{base}/models", timeout=10).status_code) == 503 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status == 200


def stream_request(base: str, max_tokens: int) -> socket.socket:
    sock = connect(base)
    body = json.dumps({"messages": USER, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


def test_requests_past_the_slots_and_the_queue_get_a_503_with_retry_after_at_once(server):
    _, base = server
    started = time.monotonic()
    running = [stream_request(base, 400) for _ in range(2)]  # the two slots
    waiting = None
    try:
        for sock in running:  # each is answering: its stream has begun
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        waiting = stream_request(base, 400)  # the queue's one place
        time.sleep(0.3)
        for path in ("/chat/completions", "/messages"):
            t0 = time.monotonic()
            r = post(base, path, {"messages": USER, "max_tokens": 2})
            assert r.status_code == 503, r.text
            assert time.monotonic() - t0 < 1.0
            assert r.headers["retry-after"].isdigit()
        assert r.json()["error"]["type"] == "overloaded_error"
        # The same endpoints without /v1, and Ollama's, are no way around the bound; each answers in its own shape.
        root = base.removesuffix("/v1")
        for path, body in (("/chat/completions", {"messages": USER, "max_tokens": 2}),
                           ("/api/chat", {"model": "x", "messages": USER, "stream": False}),
                           ("/api/generate", {"model": "x", "prompt": "Hi", "stream": False})):
            r = httpx.post(root + path, json=body, timeout=10)
            assert r.status_code == 503, (path, r.text)
            error = r.json()["error"]
            assert isinstance(error, str) if path.startswith("/api/") else error["code"] == "queue_full", error
        assert httpx.get(f"{base}/models", timeout=10).status_code == 200  # what needs no slot still answers
        time.sleep(max(0.0, started + HEAD_TIMEOUT + 0.3 - time.monotonic()))
        running[0].settimeout(5)  # an answer longer than the head timeout goes on
        assert b"data: " in running[0].recv(65536)
    finally:
        for sock in running + [waiting]:
            if sock is not None:
                sock.close()
    # The clients left: their slots are freed within a token, and the next request is answered.
    r = post(base, "/chat/completions", {"messages": USER, "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_a_grammar_with_no_way_on_fails_its_own_answer_only(server):
    """With --parallel, answers share each decode step: the one whose grammar allows no next token is a 400,
    and the answer beside it goes on (it once took every running answer down as an internal error)."""
    _, base = server
    beside = stream_request(base, 60)
    try:
        assert beside.recv(65536).startswith(b"HTTP/1.1 200 ")
        r = post(base, "/chat/completions", {"messages": USER, "max_tokens": 4, "grammar": r'root ::= "a" [\x00]'})
        assert r.status_code == 400 and "allows no token" in r.json()["error"]["message"], r.text
        beside.settimeout(60)
        rest = answer_of(beside)
    finally:
        beside.close()
    assert b'"finish_reason":"length"' in rest and b"data: [DONE]" in rest and b"error" not in rest, rest[-500:]


# --- the same hostile cases on Ollama's routes (#54: every bound holds on /api/*) ----------------------
def test_ollamas_routes_hold_the_same_bounds_in_ollamas_error_shape(server):
    proc, base = server
    root = base.removesuffix("/v1")
    before = server_rss_mb(proc)

    def refused(path: str, status: int, within_s: float = 2.0, **kw) -> str:
        started = time.monotonic()
        r = httpx.post(root + path, timeout=60, **kw)
        assert r.status_code == status, (path, r.status_code, r.text[:300])
        assert time.monotonic() - started < within_s, path
        error = r.json()["error"]
        assert isinstance(error, str) and error, r.text  # Ollama's {"error": sentence}
        return error

    for name, schema in GREEDY_SCHEMAS.items():  # `format` as a schema, and a tool's parameters
        said = refused("/api/chat", 400, 0.5, json={"model": MODEL, "messages": USER, "stream": False, "format": schema})
        assert "too big" in said or "cannot enforce in reasonable time" in said, (name, said)
    refused("/api/chat", 400, json={"model": MODEL, "messages": USER * 100_000, "stream": False})
    refused("/api/generate", 400, json={"model": MODEL, "prompt": "<|im_start|>" * 20_000, "stream": False})
    big = b'{"model": MODEL, "prompt": "' + b"a" * (11 * 2**20) + b'"}'
    refused("/api/generate", 413, content=big, headers={"Content-Type": "application/json"})
    refused("/api/chat", 415, content=json.dumps({"model": MODEL, "messages": USER}),
            headers={"Content-Type": "text/plain"})  # what a web page can send without asking
    refused("/api/chat", 403, json={"model": MODEL, "messages": USER}, headers={"Host": "attacker.example"})
    assert server_rss_mb(proc) - before < 50
    r = httpx.post(root + "/api/chat", json={"model": MODEL, "messages": USER, "stream": False,
                                             "options": {"num_predict": 2}}, timeout=60)
    assert r.status_code == 200 and r.json()["done"], r.text  # and a small request is answered
