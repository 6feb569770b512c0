"""The Connections page against real servers on 127.0.0.1: `hearth serve` with the bundled model (a
separate process, as a remote would be), a port where nothing listens, and a server that cuts its
stream mid-answer. The window is the real one, offscreen, with a real event loop."""

from __future__ import annotations

import html

import pytest

from app.core.api_keys import SERVICE, KeyStore
from app.backends.remote import RemoteEndpoint
from tests.e2e.test_llama_server_rpc import binaries, rpc_head  # noqa: F401 (fixtures)
from tests.backends.test_remote import hearth_server, llama_server, odd_server  # noqa: F401 (fixtures)
from tests.server.conftest import KEY, free_port
from tests.ui.conftest import ask, shot

MODEL = "SmolLM2-135M-Instruct.Q4_1"
WAIT_MS = 30_000


def summary_text(w) -> str:
    """The monitor's summary as read: its figures are kept whole with no-break spaces and word joiners."""
    return w.monitor.summary.text().replace("\u00a0", " ").replace("\u2060", "")


def connect(qtbot, window, url: str, key: str | None):
    """Fill in the form and press Test as a user would; returns the page once the test has ended."""
    page = window.connections
    window.tabs.setCurrentWidget(page)
    page.url.setText(url)
    page.api_key.setText(key or "")
    with qtbot.waitSignal(page.tasks._finished, timeout=WAIT_MS):
        page.test_button.click()
    return page


@pytest.mark.slow
def test_add_test_pick_and_chat_with_a_server(qtbot, idle_window, hearth_server, memory_keyring,  # noqa: F811
                                              tmp_path):
    w = idle_window
    w.resize(1366, 768)
    page = connect(qtbot, w, hearth_server, KEY)
    listed = [page.models.topLevelItem(i) for i in range(page.models.topLevelItemCount())]
    assert [(m.text(0), m.text(1), m.text(2)) for m in listed] == [(MODEL, "1024", "hearth")]
    assert page.status.text().startswith(f"Connected to {hearth_server} in ")
    assert "1 model" in page.status.text() and "The key is in the system keyring." in page.status.text()
    # The key is in the keyring, never in the settings file; the address is remembered there.
    assert memory_keyring.saved == {(SERVICE, hearth_server): KEY}
    assert w.settings["connections"] == [{"url": hearth_server, "model": None}]
    assert KEY not in repr(w.settings)

    with qtbot.waitSignal(w.bridge.model_loaded, timeout=WAIT_MS) as loaded:
        page.use_button.click()
    assert loaded.args[0]["remote"] is True and w.bridge.remote and w.bridge.ready
    # The chat's picker names the server's model too, and Load is for a model of this computer (#31.5).
    picker = w.chat.picker
    assert picker.combo.currentText() == f"{MODEL} · on {hearth_server}"
    assert not picker.load_button.isEnabled() and not picker.eject_button.isEnabled()
    qtbot.waitUntil(lambda: picker.combo.count() >= 2, timeout=10_000)  # the library's models after it
    picker.combo.setCurrentIndex(1)
    assert picker.load_button.isEnabled()  # loading it comes back to this computer
    picker.combo.setCurrentIndex(0)
    # The status bar says that the model runs remotely, and where.
    assert w.state_label.text() == "Ready · remote"
    assert w.model_label.text() == f"{MODEL} · runs on {hearth_server}"
    assert w.mem_label.text() == "memory: on the server" and w.ctx_label.text() == "context 1024"
    assert f"chats with {MODEL} on {hearth_server}" in page.current.text()
    assert w.settings["connections"] == [{"url": hearth_server, "model": MODEL}]
    assert listed[0].text(3) == "in use"

    done = ask(qtbot, w, "Name three colors.", max_tokens=16)
    assert done["text"] and done["completion_tokens"] <= 16 and done["ttft_s"] > 0
    assert w.store.messages(w.chat.conversation_id)[-1].content == done["text"]
    assert f"{done['completion_tokens']} tokens · " in w.chat.transcript.plain_text()
    # The monitor shows the stream's own figures; what a remote cannot know stays out of the summary.
    summary = summary_text(w)
    assert summary.startswith(f"Last answer: {done['completion_tokens']} tokens at ")
    assert "first token" in summary and "peak engine memory" not in summary
    assert w.speed_label.text().endswith("tok/s")
    # Greedy: regenerating through the server gives the same answer again.
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=WAIT_MS) as again:
        w.chat.regen_button.click()
    assert again.args[0]["text"] == done["text"]
    qtbot.wait(500)  # the monitor draws the answers' figures, the status bar lays out its new texts
    shot(w, "connections-light", tmp_path)
    assert [m.role for m in w.store.messages(w.chat.conversation_id)] == ["user", "assistant"]

    # Stop works through the remote backend too: the answer ends as stopped and is kept.
    w.chat.sampling.max_tokens.setValue(400)
    w.chat.input.setPlainText("Write a long story about a fox who learns to sail.")
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=WAIT_MS) as stopped:
        w.chat.send_button.click()
        qtbot.waitSignal(w.bridge.token_received, timeout=WAIT_MS).wait()
        w.chat.stop_button.click()
    assert stopped.args[0]["finish_reason"] == "cancelled"

    # Servers without llama-server's /slots (this one) give the monitor no KV figures, and are asked once.
    endpoint = RemoteEndpoint(hearth_server, KEY)
    assert endpoint.server_figures() is None and not endpoint._has_slots
    endpoint.close()
    # A second window session finds the server and its key again (the key from the keyring).
    fresh = KeyStore()
    assert fresh.get(hearth_server) == KEY

    # Switching back to this computer mid-answer stops the remote answer and keeps what came.
    w.chat.input.setPlainText("Write a long story about a fox who learns to sail.")
    with qtbot.waitSignal(w.bridge.generation_failed, timeout=WAIT_MS) as switched:
        w.chat.send_button.click()
        qtbot.waitSignal(w.bridge.token_received, timeout=WAIT_MS).wait()
        page.local_button.click()
    assert switched.args[0] == "The answer was stopped because the window switched servers."
    assert not w.chat.generating and w.store.messages(w.chat.conversation_id)[-1].meta["partial"] is True
    assert not w.bridge.remote and w.state_label.text() == "No model loaded"
    assert "this computer" in page.current.text() and not w.chat.send_button.isEnabled()
    assert picker.combo.findText(f"{MODEL} · on {hearth_server}") == -1 and picker.remote_title == ""


@pytest.mark.slow
def test_wrong_key_and_unreachable_host_are_one_sentence(qtbot, idle_window, hearth_server,  # noqa: F811
                                                        memory_keyring):
    w = idle_window
    reported = []
    w.connections.noticed.connect(lambda notice: notice.text and reported.append(notice.text))
    page = connect(qtbot, w, hearth_server, "not-the-key")
    assert page.models.topLevelItemCount() == 0 and not page.use_button.isEnabled()
    assert f"The server at {hearth_server} refused the API key (HTTP 401: Incorrect API key provided)." \
        in page.status.text()
    assert memory_keyring.saved == {}  # a key that did not work is not stored
    # A model the server no longer has (it changed models after the list was shown): one sentence.
    connect(qtbot, w, hearth_server, KEY)
    page.models.topLevelItem(0).setText(0, "gone-model")
    with qtbot.waitSignal(w.bridge.load_failed, timeout=WAIT_MS) as refused:
        page.use_button.click()
    assert refused.args[0] == (f"The server at {hearth_server} has no model 'gone-model'; "
                               f"it has '{MODEL}'.")
    assert html.escape(refused.args[0]) in page.status.text() and w.statusBar().currentMessage() == refused.args[0]
    page.local_button.click()
    down = f"http://127.0.0.1:{free_port()}/v1"
    connect(qtbot, w, down, None)
    assert f"Cannot reach {down}: connection refused." in page.status.text()
    page.url.setText("http://")
    page.test_button.click()  # refused at once, no request
    assert "is not a server address" in page.status.text()
    assert len(reported) == 3 and all(m.endswith(".") and "\n" not in m for m in reported)
    assert w.statusBar().currentMessage() == reported[-1]


def test_a_stream_cut_mid_answer_keeps_the_partial_answer(qtbot, idle_window, odd_server):  # noqa: F811
    w = idle_window
    page = connect(qtbot, w, f"{odd_server}/cut/v1", None)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=WAIT_MS):
        page.use_button.click()
    w.chat.input.setPlainText("Tell me a story.")
    with qtbot.waitSignal(w.bridge.generation_failed, timeout=WAIT_MS) as failed:
        w.chat.send_button.click()
    assert "broke mid-answer after 2 chunks" in failed.args[0] and "partial answer is kept" in failed.args[0]
    qtbot.waitUntil(lambda: not w.chat.generating, timeout=WAIT_MS)
    saved = w.store.messages(w.chat.conversation_id)[-1]
    assert saved.role == "assistant" and saved.content == "Once upon" and saved.meta["partial"] is True
    shown = w.chat.transcript.plain_text()
    assert "Once upon" in shown and "partial answer: cut off by an error" in shown and failed.args[0] in shown
    # The user can retry: Regenerate asks again (and here fails the same way, keeping the chat intact).
    assert w.chat.hint.text() == "The last answer did not finish; Regenerate asks again."
    assert w.chat.regen_button.isEnabled()


@pytest.mark.slow
def test_the_window_through_a_llama_server_rpc_head(qtbot, idle_window, rpc_head):  # noqa: F811
    """Opt-in with the llama-server test (tests/e2e/test_llama_server_rpc.py): the window chats with
    llama.cpp's own server, whose layers run on an RPC worker, and the monitor plots the server's KV use."""
    w = idle_window
    base, _log, _worker = rpc_head
    page = connect(qtbot, w, base, None)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=WAIT_MS):
        page.use_button.click()
    assert "runs on " + base in w.model_label.text() and "from the server" in w.monitor.plots["kv"].title
    with qtbot.waitSignal(page.figures.figures_received, timeout=WAIT_MS):
        done = ask(qtbot, w, "Name three colors.", max_tokens=16)
    assert done["text"] and done["completion_tokens"] <= 16
    qtbot.waitUntil(lambda: len(w.monitor.series["kv_fill"].v) > 0 and w.monitor.series["kv_fill"].v[-1] > 0,
                    timeout=WAIT_MS)


@pytest.mark.slow
def test_a_server_without_token_counts(qtbot, idle_window, llama_server):  # noqa: F811
    """llama-cpp-python's own server streams no usage: the window counts the chunks and shows no made-up
    token count."""
    w = idle_window
    page = connect(qtbot, w, llama_server, None)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=WAIT_MS):
        page.use_button.click()
    done = ask(qtbot, w, "Name three colors.", max_tokens=8)
    assert done["completion_tokens"] is None and done["stream_chunks"] > 0 and done["text"]
    assert f"{done['stream_chunks']} chunks · " in w.chat.transcript.plain_text()
    assert summary_text(w).startswith(f"Last answer: {done['stream_chunks']} chunks at ")
