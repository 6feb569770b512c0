"""The Server page: the window serves its own engine as an OpenAI-compatible API (the official `openai`
client and curl call it), logs each request live, and keeps chatting while it serves."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading

import httpx
import pytest
from PySide6.QtWidgets import QApplication

from app.core.api_keys import SERVICE
from app.ui.connections.server_page import KEY_ACCOUNT, ServerPage
from tests.server.conftest import free_port
from tests.ui.conftest import ask, shot

MODEL = "SmolLM2-135M-Instruct.Q4_1"
WAIT_MS = 60_000


def press(qtbot, page, button) -> None:
    """Start or Stop, clicked, and waited for: both run on a thread of their own while the window goes on."""
    with qtbot.waitSignal(page.serving_changed, timeout=WAIT_MS):
        button.click()
    assert not page.changing


def log_rows(page) -> list[list[str]]:
    return [[page.log.item(r, c).text() for c in range(page.log.columnCount())] for r in range(page.log.rowCount())]


@pytest.mark.slow
def test_serve_log_and_chat_while_serving(qtbot, main_window, memory_keyring, tmp_path):
    from openai import OpenAI

    w = main_window
    w.resize(1366, 768)
    page = w.server
    w.tabs.setCurrentWidget(page)
    port = free_port()
    page.port.setValue(port)
    page.cors.setText("http://editor.example")
    key = page.api_key.text()
    assert key.startswith("hearth-") and len(key) == 39
    page.copy_key_button.click()
    assert QApplication.clipboard().text() == key
    press(qtbot, page, page.start_button)
    url = f"http://127.0.0.1:{port}/v1"
    assert page.status.text() == f"Serving {MODEL} at {url}."
    assert page.server.running and page.stop_button.isEnabled() and not page.start_button.isEnabled()
    assert f"{url}/chat/completions" in page.curl.toPlainText() and key in page.python.toPlainText()

    client = OpenAI(base_url=url, api_key=key, max_retries=0)
    answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hi."}],
                                            max_tokens=8, temperature=0)
    qtbot.waitUntil(lambda: page.log.rowCount() == 1, timeout=WAIT_MS)
    (row,) = log_rows(page)
    assert row[1:4] == ["POST /v1/chat/completions", "200",
                        f"{answer.usage.prompt_tokens} in · {answer.usage.completion_tokens} out"]
    assert row[4].endswith(" ms")
    assert httpx.get(f"{url}/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    preflight = httpx.options(f"{url}/chat/completions", headers={
        "Origin": "http://editor.example", "Access-Control-Request-Method": "POST"})
    assert preflight.headers["access-control-allow-origin"] == "http://editor.example"
    qtbot.waitUntil(lambda: page.log.rowCount() == 3, timeout=WAIT_MS)
    assert [r[1:3] for r in log_rows(page)[1:]] == [["GET /v1/models", "401"],
                                                     ["OPTIONS /v1/chat/completions", "200"]]

    # The curl snippet works as copied (the shell runs it as a user would paste it).
    if shutil.which("curl"):
        out = subprocess.run(["bash", "-c", page.curl.toPlainText()], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and '"chat.completion"' in out.stdout, out.stderr

    # The window chats while the API serves: an API stream and a window answer at the same time.
    streamed: list[str] = []

    def api_stream():
        stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Count to ten."}],
                                                max_tokens=8, temperature=0, stream=True)
        streamed.extend(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

    caller = threading.Thread(target=api_stream)
    caller.start()
    done = ask(qtbot, w, "Name three colors.", max_tokens=8)
    caller.join(timeout=120)
    assert done["text"] and "".join(streamed)
    qtbot.waitUntil(lambda: page.log.rowCount() >= 4 + bool(shutil.which("curl")), timeout=WAIT_MS)
    assert log_rows(page)[-1][1:3] == ["POST /v1/chat/completions", "200"]
    qtbot.wait(300)
    shot(w, "server-light", tmp_path)

    press(qtbot, page, page.stop_button)
    assert not page.server.running and page.status.text() == "Stopped." and page.start_button.isEnabled()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=5)

    # The next session starts with the same address, port, origins and key (the key from the keyring only).
    assert memory_keyring.saved == {(SERVICE, KEY_ACCOUNT): key} and key not in repr(w.settings)
    again = ServerPage(w.bridge.local, w.settings)
    qtbot.addWidget(again)
    assert (again.port.value(), again.cors.text(), again.api_key.text()) == (port, "http://editor.example", key)


def test_refusals_are_one_sentence(qtbot, idle_window):
    page = idle_window.server
    reported = []
    page.noticed.connect(lambda notice: notice.text and reported.append(notice.text))
    page.host.setText("0.0.0.0")
    page.api_key.clear()
    press(qtbot, page, page.start_button)
    assert reported[-1] == ("Listening on 0.0.0.0 would let anyone on the network use this model; "
                            "set an API key first.")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        page.host.setText("127.0.0.1")
        port = taken.getsockname()[1]
        page.port.setValue(port)
        press(qtbot, page, page.start_button)
    assert reported[-1].startswith(f"Cannot listen on 127.0.0.1:{port}: ")
    assert not page.server.running and page.status.text() and "\n" not in reported[-1]
    # Without a model the snippets still show the address; the model name is a placeholder.
    assert "MODEL" in page.curl.toPlainText()


def test_the_windows_server_has_hearth_serves_limits(tmp_path):
    """The Server page's API is hearth serve's, limits included: a request head that never ends (a slowloris
    socket) is closed at the head deadline, as in `hearth serve` (#30 item 4)."""
    import time

    from app.backends.supervisor import Supervisor
    from app.server.edge.limits import Limits
    from app.server.options import ServeOptions
    from app.ui.bridge.background_server import BackgroundServer

    server = BackgroundServer(Supervisor())
    port = free_port()
    server.start(ServeOptions(port=port, limits=Limits(head_timeout_s=1.0)))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and then nothing more
            started = time.monotonic()
            answer = sock.recv(4096)  # the 408, then the close (b"" alone: closed without a word)
            assert time.monotonic() - started < 5 and (answer == b"" or b" 408 " in answer.split(b"\r\n")[0])
    finally:
        server.stop()
