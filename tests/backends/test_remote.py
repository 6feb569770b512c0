"""RemoteEndpoint against real servers on 127.0.0.1, started here: `hearth serve` (Hearth to Hearth),
llama-cpp-python's own OpenAI server, and a small HTTP server that misbehaves on purpose."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from app.core.errors import EngineBusy, GenerationError, ModelLoadError
from app.protocol import messages as P
from app.backends.client import EngineClient
from app.backends.remote import RemoteEndpoint
from tests.server.conftest import CTX, KEY, free_port, start_server, stop_server
from tests.server.openai.test_openai_api import QUESTION

GREEDY = P.SamplingOptions(temperature=0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, max_tokens=30)
STORY = [{"role": "user", "content": "Write a long story about a fox who learns to sail."}]
EVENT_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def hearth_server(tmp_path_factory):
    proc, base = start_server("--api-key", KEY, env={"HEARTH_HOME": str(tmp_path_factory.mktemp("serve_home"))})
    yield base
    stop_server(proc)


def start_llama_server(model) -> tuple[subprocess.Popen, str]:
    """llama-cpp-python's server (the [server] extra) with the bundled model; ready once it lists it."""
    port = free_port()
    # Its log goes to a file: a pipe nobody reads fills up with a long traceback and blocks the server.
    log = tempfile.NamedTemporaryFile("w+", prefix="llama-cpp-server-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", str(CTX), "--n_threads", "1", "--verbose", "False"],
                            stdout=subprocess.DEVNULL, stderr=log, text=True)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"llama_cpp.server did not start: {open(log.name).read()}")
        try:
            if httpx.get(base + "/models", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("llama_cpp.server did not answer within 120 s")


@pytest.fixture(scope="module")
def llama_server(third_party_model):
    pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server] (the test extra)")
    proc, base = start_llama_server(third_party_model)
    yield base
    stop_server(proc)


def events_of(backend, start) -> tuple[list[P.Event], P.Event]:
    """All events of one request, up to its Done or Failed (which is returned as well)."""
    got: queue.Queue = queue.Queue()
    start(backend, got.put)
    events = []
    while True:
        event = got.get(timeout=EVENT_TIMEOUT_S)
        events.append(event)
        if isinstance(event, (P.Done, P.Failed)):
            return events, event


def tokens(events) -> str:
    return "".join(e.text for e in events if isinstance(e, P.Token))


def one_sentence(message: str) -> bool:
    return message.endswith((".", ")")) and "\n" not in message and "Traceback" not in message


# --- Hearth to Hearth -------------------------------------------------------
@pytest.mark.slow
def test_hearth_serve_greedy_answer_is_the_local_engines(hearth_server, bundled_model):
    with EngineClient(RemoteEndpoint(hearth_server, api_key=KEY)) as remote:
        info = remote.load(P.LoadOptions())
        assert info["remote"] is True and info["path"] == hearth_server
        assert info["model"] == "SmolLM2-135M-Instruct.Q4_1" and info["n_ctx"] == CTX
        assert info["n_threads"] is None and info["n_layer"] is None  # what a remote cannot know
        events = list(remote.chat(QUESTION, GREEDY))
    done = events[-1]
    assert isinstance(done, P.Done) and tokens(events) == done["text"] and done["text"]
    assert done["finish_reason"] in ("stop", "length") and done["completion_tokens"] <= 30
    assert done["prompt_tokens"] > 0 and done["ttft_s"] > 0 and done["gen_tok_s"] > 0
    with EngineClient() as local:
        local.load(P.LoadOptions(model_path=str(bundled_model), n_ctx=CTX, n_threads=1))
        here = [e for e in local.chat(QUESTION, GREEDY) if isinstance(e, P.Done)][0]
    assert done["text"] == here["text"] and done["completion_tokens"] == here["completion_tokens"]
    assert set(here) - {"rss_mb", "gpu_mb", "gpu_total_mb"} <= set(done)  # the local Done's keys, every one


@pytest.mark.slow
def test_hearth_serve_completion_and_models(hearth_server):
    backend = RemoteEndpoint(hearth_server, api_key=KEY)
    try:
        assert [m["id"] for m in backend.models()] == ["SmolLM2-135M-Instruct.Q4_1"]
        events, done = events_of(backend, lambda b, sink: b.complete("The capital of France is", GREEDY, sink))
        assert isinstance(done, P.Done) and done["text"] == tokens(events) and done["completion_tokens"] == 30
        assert done["finish_reason"] == "length" and not backend.busy
    finally:
        backend.close()


@pytest.mark.slow
def test_embeddings_through_a_remote_are_the_servers(hearth_server, bundled_model):
    remote = EngineClient(RemoteEndpoint(hearth_server, api_key=KEY))
    try:
        remote.load(P.LoadOptions())
        done = remote.embed(["The cat sat.", "Revenue rose."], timeout=EVENT_TIMEOUT_S)
    finally:
        remote.close()
    with EngineClient() as local:
        local.load(P.LoadOptions(model_path=str(bundled_model), n_ctx=CTX, n_threads=1))
        here = local.embed(["The cat sat.", "Revenue rose."], timeout=EVENT_TIMEOUT_S)
    assert done["n_embd"] == here["n_embd"] and done["prompt_tokens"] == here["prompt_tokens"]
    for theirs, ours in zip(done["embeddings"], here["embeddings"]):
        assert sum(a * b for a, b in zip(theirs, ours)) > 1 - 1e-4  # the same vector, within kernel rounding


@pytest.mark.slow
def test_cancel_closes_the_stream_and_frees_the_server(hearth_server):
    backend = RemoteEndpoint(hearth_server, api_key=KEY)
    got: queue.Queue = queue.Queue()
    rid = backend.chat(STORY, P.SamplingOptions(temperature=0.8, seed=1, max_tokens=400), got.put)
    assert backend.busy
    seen = []
    while len([e for e in seen if isinstance(e, P.Token)]) < 3:
        seen.append(got.get(timeout=EVENT_TIMEOUT_S))
    t = time.monotonic()
    backend.cancel(rid)
    while not isinstance(seen[-1], (P.Done, P.Failed)):
        seen.append(got.get(timeout=5))
    done = seen[-1]
    assert isinstance(done, P.Done) and done["finish_reason"] == "cancelled" and time.monotonic() - t < 2
    assert done["text"] == tokens(seen) and not backend.busy
    # The server noticed the client leave and stopped generating.
    auth = {"Authorization": f"Bearer {KEY}"}  # (without the key, /health says only whether the server is up)
    health = httpx.get(hearth_server.removesuffix("/v1") + "/health", headers=auth, timeout=5)
    deadline = time.monotonic() + 10
    while health.json().get("busy") and time.monotonic() < deadline:
        time.sleep(0.2)
        health = httpx.get(hearth_server.removesuffix("/v1") + "/health", headers=auth, timeout=5)
    assert health.json()["busy"] is False
    backend.close()


@pytest.mark.slow
def test_wrong_key_is_one_sentence(hearth_server):
    for key, says in ((None, "without an API key"), ("sk-wrong", "refused the API key")):
        with EngineClient(RemoteEndpoint(hearth_server, api_key=key)) as remote:
            with pytest.raises(ModelLoadError) as caught:
                remote.load(P.LoadOptions())
            message = str(caught.value)
            assert message.startswith(f"The server at {hearth_server} ") and says in message and "401" in message
            assert one_sentence(message)
            with pytest.raises(ModelLoadError, match="401"):  # an answer is refused the same way
                list(remote.chat(QUESTION, GREEDY))


@pytest.mark.slow
def test_model_that_the_server_does_not_have(hearth_server):
    with EngineClient(RemoteEndpoint(hearth_server, api_key=KEY, model="llama-70b")) as remote:
        with pytest.raises(ModelLoadError) as caught:
            remote.load(P.LoadOptions())
    assert str(caught.value) == (f"The server at {hearth_server} has no model 'llama-70b'; "
                                 "it has 'SmolLM2-135M-Instruct.Q4_1'.")


@pytest.mark.slow
def test_server_killed_mid_answer_keeps_the_partial_answer(tmp_path):
    proc, base = start_server(env={"HEARTH_HOME": str(tmp_path)})
    backend = RemoteEndpoint(base)
    try:
        got: queue.Queue = queue.Queue()
        backend.chat(STORY, P.SamplingOptions(temperature=0.8, seed=2, max_tokens=800), got.put)
        seen = []
        while len([e for e in seen if isinstance(e, P.Token)]) < 5:
            seen.append(got.get(timeout=EVENT_TIMEOUT_S))
        proc.kill()
        while not isinstance(seen[-1], (P.Done, P.Failed)):
            seen.append(got.get(timeout=10))
        failed = seen[-1]
        assert isinstance(failed, P.Failed) and failed.kind is P.ErrorKind.GENERATION
        assert failed.message.startswith(f"The connection to {base} broke mid-answer after ")
        assert failed.message.endswith("; the partial answer is kept.") and one_sentence(failed.message)
        assert failed["text"] == tokens(seen) and len(failed["text"]) > 0
        assert not backend.busy
    finally:
        proc.kill()
        proc.wait()
        backend.close()


def test_server_down_is_a_fast_sentence():
    base = f"http://127.0.0.1:{free_port()}/v1"
    with EngineClient(RemoteEndpoint(base)) as remote:
        t = time.monotonic()
        with pytest.raises(ModelLoadError) as caught:
            remote.load(P.LoadOptions())
        assert str(caught.value) == f"Cannot reach {base}: connection refused."
        with pytest.raises(GenerationError, match=r"^Cannot reach .*: connection refused\.$"):
            list(remote.chat(QUESTION, GREEDY))
        assert time.monotonic() - t < 2


# --- llama-cpp-python's own server -------------------------------------------
@pytest.mark.slow
def test_llama_cpp_server_streamed_answer_is_its_own_answer(llama_server, third_party_model):
    whole = httpx.post(llama_server + "/chat/completions", timeout=60, json={
        "messages": QUESTION, "temperature": 0, "top_k": 0, "top_p": 1, "min_p": 0, "repeat_penalty": 1,
        "max_tokens": 30}).json()
    backend = RemoteEndpoint(llama_server, model=third_party_model.stem)  # its id is the file's path
    try:
        with EngineClient(backend) as remote:
            info = remote.load(P.LoadOptions())
            assert info["model"].endswith(third_party_model.name) and info["n_ctx"] is None
            events = list(remote.chat(QUESTION, GREEDY))
        done = events[-1]
        assert done["text"] == whole["choices"][0]["message"]["content"] == tokens(events)
        assert done["finish_reason"] == whole["choices"][0]["finish_reason"]
        # This server streams no usage: counts it does not send stay None, times are measured.
        assert done["completion_tokens"] is None and done["prompt_tokens"] is None
        assert done["stream_chunks"] > 0 and done["ttft_s"] > 0 and done["gen_tok_s"] > 0
    finally:
        backend.close()


# --- a server that misbehaves on purpose ------------------------------------
class _Odd(BaseHTTPRequestHandler):
    """/<case>/v1/...: html (not OpenAI), busy (429), loading (503), cut (stream ends mid-answer),
    garbage (a chunk that is not JSON)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        case = self.path.split("/")[1]
        if case == "html":
            self._send(200, b"<html><body>Welcome to nginx!</body></html>", "text/html")
        elif case == "busy":
            self._send(429, json.dumps({"error": {"message": "Too many requests."}}).encode(), "application/json")
        elif case == "loading":
            self._send(503, json.dumps({"error": "Loading model"}).encode(), "application/json")
        else:
            self._send(200, json.dumps({"object": "list", "data": [{"id": "odd"}]}).encode(), "application/json")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        case = self.path.split("/")[1]
        if case == "busy":
            return self.do_GET()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data: str) -> None:
            raw = data.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
            self.wfile.flush()

        for word in ("Once", " upon"):
            chunk("data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": word}}]}) + "\n\n")
        if case == "garbage":
            chunk("data: <html>oops</html>\n\n")
        self.close_connection = True  # cut: no finish, no [DONE], no closing chunk


@pytest.fixture(scope="module")
def odd_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Odd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_not_openai_busy_and_loading_servers(odd_server):
    cases = (("html", ModelLoadError, "did not answer with OpenAI's model list"),
             ("busy", EngineBusy, "is busy (HTTP 429: Too many requests); try again in a moment."),
             ("loading", EngineBusy, "is busy (HTTP 503: Loading model); try again in a moment."))
    for case, error, says in cases:
        with EngineClient(RemoteEndpoint(f"{odd_server}/{case}/v1")) as remote:
            with pytest.raises(error) as caught:
                remote.load(P.LoadOptions())
        assert says in str(caught.value) and one_sentence(str(caught.value))
    with EngineClient(RemoteEndpoint(f"{odd_server}/busy/v1")) as remote:
        with pytest.raises(EngineBusy, match="HTTP 429"):
            list(remote.chat(QUESTION, GREEDY))


def test_a_cut_or_garbled_stream_keeps_the_partial_answer(odd_server):
    for case, says in (("cut", "broke mid-answer after 2 chunks"), ("garbage", "did not answer in OpenAI's format")):
        backend = RemoteEndpoint(f"{odd_server}/{case}/v1")
        events, failed = events_of(backend, lambda b, sink: b.chat(QUESTION, GREEDY, sink))
        backend.close()
        assert isinstance(failed, P.Failed) and failed.kind is P.ErrorKind.GENERATION, failed
        assert says in failed.message and one_sentence(failed.message)
        assert failed["text"] == tokens(events) == "Once upon"


def test_tls_to_a_plain_http_server_is_one_sentence(odd_server):
    base = odd_server.replace("http://", "https://") + "/ok/v1"
    with EngineClient(RemoteEndpoint(base)) as remote:
        with pytest.raises(ModelLoadError) as caught:
            remote.load(P.LoadOptions())
    assert str(caught.value).startswith(f"Cannot connect securely to {base}: TLS failed (")
    assert one_sentence(str(caught.value))


def test_not_a_url():
    with pytest.raises(ModelLoadError, match="is not a server address"):
        RemoteEndpoint("http://")



def test_a_request_that_cannot_start_leaves_the_endpoint_not_busy(monkeypatch):
    """The busy state is released on every path: a request whose body cannot be built was left taken for good."""
    import app.backends.remote as remote

    def unbuildable(sampling):
        raise ValueError("cannot be built")

    monkeypatch.setattr(remote, "_sampling_body", unbuildable)
    backend = RemoteEndpoint(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(ValueError):
        backend.chat([{"role": "user", "content": "Hi"}], P.SamplingOptions(max_tokens=3), lambda event: None)
    assert not backend.busy
    backend.close()
