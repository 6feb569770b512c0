"""#54: Open WebUI (PyPI `open-webui`) with `hearth serve --ollama-port` as its Ollama connection, driven through
Open WebUI's own REST API as its browser front end drives it: the first (admin) user's signup, the admin's "verify
connection", the model list, and a chat whole and streamed. The chat must be Hearth's: Open WebUI's answer is the
text Hearth gives for the exact request Open WebUI sent it.

Open WebUI is the real one, from its own virtual environment (OPEN_WEBUI_VENV, default ~/.cache/hearth-open-webui;
`bash tests/run.sh --heavy` makes it: 2 min 16 s and 2.9 GB with the CPU torch on the 2-core machine). Its
dependencies (torch, chromadb, transformers, ...) must not reach Hearth's environment, and it starts in about
20 s: the heavy tier. Between the two sits a pass-through that records each request Open WebUI sends Hearth, so
that the test can replay that request to Hearth itself and a failure names the request Hearth refused."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import free_port, start_server, stop_server

pytestmark = pytest.mark.heavy  # a 2.9 GB install and a 20 s start: the heavy tier, which CI runs after the suite

OPEN_WEBUI_VERSION = "0.12.4"  # the release this was tested with (`pip index versions open-webui` on 2026-12-07)
VENV = Path(os.environ.get("OPEN_WEBUI_VENV") or Path.home() / ".cache" / "hearth-open-webui")
MODEL = "SmolLM2-135M-Instruct.Q4_1:latest"  # the name /api/tags gives the bundled model
ASK = [{"role": "user", "content": "Name three colors."}]
# What the front end's chat controls send as `params`; for an Ollama model Open WebUI passes them on as options
# (max_tokens becomes num_predict).
PARAMS = {"temperature": 0, "seed": 1, "max_tokens": 32}


@dataclass
class Seen:
    method: str
    path: str
    body: bytes
    status: int
    ignored: str | None  # Hearth's Hearth-Ignored-Fields header: the request fields it left out


class _Forward(BaseHTTPRequestHandler):
    """Passes one request on to Hearth unchanged and its answer back as it comes (a stream stays a stream)."""

    protocol_version = "HTTP/1.1"  # Open WebUI's aiohttp keeps its connection open between requests

    def _forward(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size) if size else b""
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection", "content-length", "transfer-encoding")}
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.hearth_port, timeout=300)
        upstream.request(self.command, self.path, body=body or None, headers=headers)
        answer = upstream.getresponse()
        self.server.seen.append(Seen(self.command, self.path, body, answer.status,
                                     answer.getheader("Hearth-Ignored-Fields")))
        self.send_response_only(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", answer.getheader("Content-Length") or "0")
            self.end_headers()
        else:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while piece := answer.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        upstream.close()

    do_GET = do_POST = do_DELETE = do_HEAD = _forward

    def log_message(self, *args) -> None:  # the record is self.server.seen
        pass


@pytest.fixture(scope="module")
def hearth(tmp_path_factory):
    """Hearth's Ollama port."""
    if not (VENV / "bin" / "open-webui").exists():
        pytest.skip(f"Open WebUI is not installed in {VENV}: `bash tests/run.sh --heavy` installs it "
                    f"(python3 -m venv {VENV} && {VENV}/bin/pip install torch==2.13.0 open-webui=={OPEN_WEBUI_VERSION})")
    port = free_port()
    proc, _ = start_server("--ollama-port", str(port), env={"HEARTH_HOME": str(tmp_path_factory.mktemp("owui_home"))})
    yield f"http://127.0.0.1:{port}"
    assert stop_server(proc)


@pytest.fixture(scope="module")
def recorder(hearth):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Forward)
    server.daemon_threads = True
    server.hearth_port = int(hearth.rsplit(":", 1)[1])
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def webui(recorder, tmp_path_factory):
    """Open WebUI's base URL, started as `open-webui serve` with Hearth as its one Ollama connection."""
    data = tmp_path_factory.mktemp("owui_data")
    port = free_port()
    env = {**os.environ,
           "DATA_DIR": str(data),  # its SQLite database, uploads and cache: a fresh first run
           "OLLAMA_BASE_URL": f"http://127.0.0.1:{recorder.server_address[1]}",
           "ENABLE_OPENAI_API": "false",  # else its model list also asks api.openai.com, unreachable here
           # No network beyond Hearth: no Hugging Face downloads, no version check, no pip installs for plugins,
           "OFFLINE_MODE": "true", "HF_HUB_OFFLINE": "1", "ENABLE_VERSION_UPDATE_CHECK": "false",
           # and no sentence-transformers embedding model loaded at start (documents are not tested here).
           "RAG_EMBEDDING_MODEL": "",
           "WEBUI_SECRET_KEY": secrets.token_hex(32),  # `open-webui serve` would write one into its cwd
           "ANONYMIZED_TELEMETRY": "false", "DO_NOT_TRACK": "true", "SCARF_NO_ANALYTICS": "true"}
    log = data / "open-webui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(VENV / "bin" / "open-webui"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                                cwd=data, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240  # about 30 s on the 2-core machine; its first run migrates a new database
        while True:
            assert proc.poll() is None, f"open-webui exited ({proc.returncode}): {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"open-webui was not ready in 240 s: {log.read_text()[-3000:]}"
            try:
                if httpx.get(base + "/ready", timeout=5).status_code == 200:  # 200 once its startup has finished
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def admin(webui) -> dict:
    """The first user's signup, which makes it the admin, as the browser's first page does."""
    made = httpx.post(webui + "/api/v1/auths/signup", timeout=60,
                      json={"name": "Hearth Test", "email": "admin@example.com", "password": "Hearth-test-1"})
    assert made.status_code == 200, made.text
    assert made.json()["role"] == "admin"
    return {"Authorization": f"Bearer {made.json()['token']}"}


def test_open_webui_lists_hearths_model(webui, admin, hearth, recorder):
    running = httpx.get(webui + "/api/version", timeout=30).json()["version"]
    print(f"open-webui {running}")
    assert running == OPEN_WEBUI_VERSION, f"{VENV} holds Open WebUI {running}; this test follows {OPEN_WEBUI_VERSION}"
    # The admin settings' "verify connection" button: Open WebUI asks the server's /api/version.
    verified = httpx.post(webui + "/ollama/verify", headers=admin, timeout=60,
                          json={"url": f"http://127.0.0.1:{recorder.server_address[1]}", "key": ""})
    assert verified.status_code == 200, verified.text
    assert verified.json() == httpx.get(hearth + "/api/version").json()
    tags = httpx.get(hearth + "/api/tags").json()["models"]
    assert [m["name"] for m in tags] == [MODEL]
    listed = httpx.get(webui + "/api/models", headers=admin, timeout=60)
    assert listed.status_code == 200, listed.text
    models = {m["id"]: m for m in listed.json()["data"]}
    assert list(models) == [MODEL]  # only Hearth's model: the OpenAI connection is off
    mine = models[MODEL]
    assert mine["owned_by"] == "ollama" and mine["ollama"]["details"] == tags[0]["details"]
    assert mine["ollama"]["digest"] == tags[0]["digest"] and mine["ollama"]["size"] == tags[0]["size"]


def _chat_sent(recorder, since: int) -> dict:
    """The body of the one /api/chat Open WebUI sent Hearth after record `since`."""
    chats = [s for s in recorder.seen[since:] if s.method == "POST" and s.path == "/api/chat"]
    assert len(chats) == 1, [(s.method, s.path) for s in recorder.seen[since:]]
    assert chats[0].status == 200, chats[0]
    return json.loads(chats[0].body)


def test_a_chat_through_open_webui_is_hearths_greedy_answer(webui, admin, hearth, recorder):
    since = len(recorder.seen)
    asked = httpx.post(webui + "/api/chat/completions", headers=admin, timeout=300,
                       json={"model": MODEL, "messages": ASK, "stream": False, "params": PARAMS})
    assert asked.status_code == 200, asked.text
    answer = asked.json()
    assert answer["model"] == MODEL
    text = answer["choices"][0]["message"]["content"]
    assert text.strip()
    sent = _chat_sent(recorder, since)
    print("Open WebUI sent Hearth: POST /api/chat", json.dumps(sent))
    # What reached Hearth: the messages as written, the front end's params as Ollama's options, no system prompt.
    assert sent["model"] == MODEL and sent["messages"] == ASK
    assert sent["options"]["temperature"] == 0 and sent["options"]["num_predict"] == 32
    # The same request sent to Hearth directly: greedy, so the same text, token for token.
    direct = httpx.post(hearth + "/api/chat", json={**sent, "stream": False}, timeout=300).json()
    assert direct["message"]["content"] == text
    assert answer["usage"]["eval_count"] == direct["eval_count"]
    assert answer["usage"]["prompt_eval_count"] == direct["prompt_eval_count"]


def test_a_streamed_chat_through_open_webui(webui, admin, hearth, recorder):
    """The browser's way: stream true, which Open WebUI answers with OpenAI's server-sent events."""
    whole = httpx.post(hearth + "/api/chat", timeout=300, json={
        "model": MODEL, "messages": ASK, "stream": False,
        "options": {"temperature": 0, "seed": 1, "num_predict": 32}}).json()["message"]["content"]
    since = len(recorder.seen)
    pieces = []
    with httpx.stream("POST", webui + "/api/chat/completions", headers=admin, timeout=300,
                      json={"model": MODEL, "messages": ASK, "stream": True, "params": PARAMS}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[len("data: "):])
                pieces += [c["delta"].get("content") or "" for c in event.get("choices", [])]
    assert len([p for p in pieces if p]) > 1  # streamed, not one piece
    assert "".join(pieces) == whole
    assert _chat_sent(recorder, since)["stream"] is True


def test_every_request_open_webui_sent_hearth_was_answered(recorder):
    """Runs last: the whole record of this module's conversation between the two."""
    for s in recorder.seen:
        print(s.method, s.path, s.status, f"ignored: {s.ignored}" if s.ignored else "")
    assert recorder.seen, "Open WebUI sent Hearth nothing"
    refused = [(s.method, s.path, s.body[:500], s.status) for s in recorder.seen if s.status >= 400]
    assert not refused, refused
