"""Tools in the window (#35) with the real engine, the bundled model and real MCP servers: the Tools page adds,
tests and removes servers (secrets to the keyring); a chat with the real mcp-server-time enabled shows the
model's call as a block, runs it only after Allow once, puts the server's real result in the conversation and
answers after it; the chat reopened from the store shows the block again; Deny never reaches the server;
regenerating keeps each version's calls and "Always allow" is remembered; a server that hangs is stopped with
Stop, and a call that waits is stopped with Esc, without a hang.

The bundled 135M model cannot choose tools, so the call is forced (the chat's tool_overrides, as `hearth chat
--tool-choice TOOL --tool-arg` does) with its time zone fixed through the schema.
"""

from __future__ import annotations

import pytest

import json
import re
import sys
import time
from datetime import datetime, timezone

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.core import paths
from app.tools.servers import ServerEntry, allowed_tools, load_servers, save_server
from tests.ui.conftest import ask, shot
from tests.helpers.paths import MISBEHAVING_MCP

MISBEHAVING = MISBEHAVING_MCP
ANSWER_MS = 120_000  # a server's start and two rounds of the model on a loaded 2-core machine


def force(chat, tool: str, **pinned) -> None:
    # One round: after its result the model answers in words (a 135M model asked "auto" calls again and again).
    chat.tool_overrides = {"choice": "required", "forced": tool, "pinned": {tool: pinned} if pinned else None,
                           "max_rounds": 1}


def wait_for_approval(qtbot, chat) -> dict:
    qtbot.waitUntil(lambda: chat.approval.isVisible(), timeout=ANSWER_MS)
    return chat._waiting_call


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
def test_a_chat_calls_the_real_time_server_after_the_user_allows_it_and_keeps_the_call(qtbot, main_window, tmp_path):
    window, chat = main_window, main_window.chat
    info = window.bridge.info
    # The badge says what the template says (SmolLM2's knows no tools), in the picker and on the Tools page.
    expected = "Trained for tools" if info["knows_tools"] else "Not trained for tools"
    assert chat.picker.tools_badge.isVisible() and chat.picker.tools_badge.text() == expected
    assert expected.lower() in window.tools.model_line.text()

    save_server(ServerEntry("time", command="mcp-server-time", args=["--local-timezone", "UTC"]))
    save_server(ServerEntry("flaky", command=sys.executable, args=[str(MISBEHAVING)]))
    chat.tools_panel.refresh()
    chat.tools_panel.set_chosen(["time"])
    force(chat, "get_current_time", timezone="Europe/Paris")

    # 1. Allow once: the block shows the call with its arguments, the server's real time comes back, the model
    # answers after it.
    ask(qtbot, window, "What time is it in Paris?", max_tokens=40, wait=False)
    waiting = wait_for_approval(qtbot, chat)
    assert (waiting["server"], waiting["tool"], waiting["arguments"]) == ("time", "get_current_time",
                                                                          {"timezone": "Europe/Paris"})
    assert "runs as you, with your permissions" in chat.approval_text.text()
    shown = chat.transcript.plain_text()
    assert "Tool call" in shown and "waiting for you to allow it" in shown and '"Europe/Paris"' in shown
    shot(window, "tools-chat-waiting", tmp_path)
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=ANSWER_MS) as finished:
        chat.allow_once_button.click()
    assert not chat.approval.isVisible()
    done = finished.args[0]
    call = done["tool_calls"][0]
    result = json.loads(call["result"])  # what mcp-server-time answered
    assert call["decision"] == "once" and not call["is_error"] and result["timezone"] == "Europe/Paris"
    assert abs((datetime.fromisoformat(result["datetime"]) - datetime.now(timezone.utc)).total_seconds()) < 300
    assert done["completion_tokens"] > 0 and done["text"].strip()  # generated after the result
    shown = chat.transcript.plain_text()
    assert result["datetime"] in shown and "allowed once" in shown
    after = shown[shown.index("allowed once"):]  # the answer's words follow the block (markup aside)
    assert any(word in after for word in re.findall(r"[A-Za-z]{4,}", done["text"]))
    assert allowed_tools("time") == set()  # once is not always
    shot(window, "tools-chat-approved", tmp_path)
    cid = chat.conversation_id
    answer = window.store.messages(cid)[-1]
    assert answer.meta["tool_calls"][0]["result"] == call["result"] and answer.content == done["text"]
    assert window.store.chat_tools(cid) == ["time"]

    # 2. Reopened from the store: the block is there, closed; opened, it shows the result.
    chat.new_conversation()
    assert chat.tools_panel.chosen() == []
    chat.open_conversation(cid)
    qtbot.waitUntil(lambda: not chat.transcript.loading, timeout=10_000)
    assert chat.tools_panel.chosen() == ["time"]
    block = chat.transcript.calls[call["id"]]
    assert not block.expanded and "get_current_time" in chat.transcript.plain_text()
    assert result["datetime"] not in chat.transcript.plain_text()
    chat.transcript.toggle_call(call["id"])
    assert result["datetime"] in chat.transcript.plain_text()

    # 3. Deny, in the same chat: the first call and its result go to the model with the question; this one never
    # reaches the server, and the model still answers.
    force(chat, "get_current_time", timezone="Asia/Tokyo")
    ask(qtbot, window, "And in Tokyo?", max_tokens=40, wait=False)
    wait_for_approval(qtbot, chat)
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=ANSWER_MS) as finished:
        chat.deny_button.click()
    denied = finished.args[0]["tool_calls"][0]
    assert denied["decision"] == "deny" and denied["result"] == "The user did not allow this call."
    assert denied["seconds"] == 0 and "denied" in chat.transcript.plain_text()

    # 4. Regenerating the first answer asks again; "Always allow this tool" runs it and is kept for the server's
    # tool. The new version keeps its own call, the old one (with what followed it) stays a version back.
    force(chat, "get_current_time", timezone="Europe/Paris")
    first = window.store.messages(cid)[1]
    chat.regenerate(first.id)
    wait_for_approval(qtbot, chat)
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=ANSWER_MS):
        chat.allow_always_button.click()
    again = window.store.message(first.id)
    assert again.versions == 2 and again.meta["tool_calls"][0]["decision"] == "always"
    assert allowed_tools("time") == {"get_current_time"}
    old = window.store.versions(first.id)[0]
    assert old["meta"]["tool_calls"][0]["result"] == call["result"] and old["tail"][1]["meta"]["tool_calls"]

    # 5. A server that hangs: allowed, it runs, and Stop ends it at once with a stopped result, not at its timeout.
    chat.tools_panel.set_chosen(["flaky"])
    force(chat, "hang")
    ask(qtbot, window, "Wait for it.", max_tokens=40, wait=False)
    wait_for_approval(qtbot, chat)
    waiting = chat._waiting_call
    chat.allow_once_button.click()
    # The answer's thread took the answer and the call runs (the server sleeps): then Stop.
    qtbot.waitUntil(lambda: chat.transcript.calls[waiting["id"]].call["state"] == "running", timeout=10_000)
    assert "running…" in chat.transcript.plain_text()
    qtbot.wait(300)
    started = time.monotonic()
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=15_000) as finished:
        chat.stop_button.click()
    assert time.monotonic() - started < 5
    hung = finished.args[0]["tool_calls"][0]
    assert hung["stopped"] and hung["is_error"] and "was stopped" in hung["result"]
    assert finished.args[0]["finish_reason"] == "cancelled" and "stopped" in chat.transcript.plain_text()
    assert window.store.messages(cid)[-1].meta["tool_calls"][0]["stopped"]

    # 6. Esc while a call waits for the user: stopped, never run, and the chat is ready for the next question.
    ask(qtbot, window, "Once more.", max_tokens=40, wait=False)
    wait_for_approval(qtbot, chat)
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=15_000) as finished:
        QTest.keyClick(chat.input, Qt.Key_Escape)
    stopped = finished.args[0]["tool_calls"][0]
    assert stopped["decision"] == "stopped" and stopped["seconds"] == 0 and not chat.approval.isVisible()
    assert chat.send_button.isEnabled() and not chat.generating


def test_the_tools_page_adds_tests_and_removes_servers_and_keeps_secrets_in_the_keyring(qtbot, idle_window,
                                                                                       memory_keyring, tmp_path):
    window = idle_window
    window.tabs.setCurrentWidget(window.tools)
    page = window.tools
    assert "Tools run as you, with your permissions" in page.runs_as_you.text() and page.runs_as_you.isVisible()
    assert "No model is loaded" in page.model_line.text()

    page.name_edit.setText("time")
    page.command_edit.setText("mcp-server-time --local-timezone 'Europe/Paris'")
    page.env_edit.setPlainText("TZ=UTC\nTIME_API_KEY=abc123")
    page.add_button.click()
    entry = load_servers()["time"]
    assert (entry.command, entry.args) == ("mcp-server-time", ["--local-timezone", "Europe/Paris"])
    assert entry.env == {"TZ": "UTC", "TIME_API_KEY": "${keyring:time/env/TIME_API_KEY}"}
    assert "abc123" not in paths.mcp_config_file().read_text()
    assert "time" in [window.chat.tools_panel.list.item(i).text() for i in range(window.chat.tools_panel.list.count())]

    page.http_choice.setChecked(True)
    page.name_edit.setText("docs")
    page.url_edit.setText("https://example.com/mcp")
    page.headers_edit.setPlainText("Authorization: Bearer sk-remote")
    page.add_button.click()
    assert load_servers()["docs"].headers == {"Authorization": "${keyring:docs/headers/Authorization}"}
    assert "Bearer sk-remote" in memory_keyring.saved.values()

    page.name_edit.setText("bad name!")  # one sentence, nothing written
    page.add_button.click()
    assert "a server's name must be" in page.status.text() and set(load_servers()) == {"time", "docs"}

    page.select("time")
    with qtbot.waitSignal(page.tested, timeout=60_000):
        page.test_button.click()
    listed = page.details.toPlainText()
    assert "get_current_time" in listed and "convert_time" in listed and '"timezone"' in listed
    window.resize(1366, 768)
    shot(window, "tools-page", tmp_path)

    page.select("docs")
    page.remove_button.click()
    assert set(load_servers()) == {"time"} and "Bearer sk-remote" not in memory_keyring.saved.values()


def test_a_model_not_trained_for_tools_is_said_and_the_box_offers_a_forced_call(qtbot, main_window):
    """#55 E1: with tools ticked, the bundled model wrote made-up Python and a literal <tool_call>, no call was made
    and nothing said why. The chat says it, and the Tools box offers what the CLI's --tool-choice required does."""
    window, chat = main_window, main_window.chat
    assert not window.bridge.info["knows_tools"]
    save_server(ServerEntry("time", command="mcp-server-time", args=["--local-timezone", "UTC"]))
    chat.tools_panel.refresh()
    chat.tools_panel.set_chosen(["time"])
    box = chat.tools_panel.choice
    assert box.isVisibleTo(chat.tools_panel) and [box.itemData(i) for i in range(box.count())] == ["auto", "required"]
    ask(qtbot, window, "What time is it in Tokyo? Use the tool.", max_tokens=16, wait=False)
    qtbot.waitUntil(lambda: window.notices.board.of("chat.tools") is not None, timeout=10_000)
    assert "not trained for tools" in window.notices.board.of("chat.tools").text
    assert "Always call a tool" in window.notices.board.of("chat.tools").text
    chat.stop()
    qtbot.waitUntil(lambda: not chat.generating, timeout=ANSWER_MS)
    # Chosen in the box, the call is forced: the answer waits for the user's approval of a real call.
    box.setCurrentIndex(box.findData("required"))
    chat.tool_overrides = {"max_rounds": 1}
    ask(qtbot, window, "What time is it in Tokyo?", max_tokens=40, wait=False)
    call = wait_for_approval(qtbot, chat)
    assert call["server"] == "time"
    chat.stop()
    qtbot.waitUntil(lambda: not chat.generating, timeout=ANSWER_MS)


def test_the_add_form_shows_only_the_fields_of_the_kind_chosen(qtbot, idle_window):
    """#55 F: for a program (stdio), Address and Headers looked enabled, fields to fill for nothing."""
    page = idle_window.tools
    for kind, shown, hidden in ((page.stdio_choice, (page.command_edit, page.env_edit), (page.url_edit, page.headers_edit)),
                                (page.http_choice, (page.url_edit, page.headers_edit), (page.command_edit, page.env_edit))):
        kind.setChecked(True)
        assert all(w.isVisibleTo(page) for w in shown) and not any(w.isVisibleTo(page) for w in hidden)
