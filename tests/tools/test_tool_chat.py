"""The whole round trip with the real bundled model, the real engine and real MCP servers: the call (forced,
its time zone fixed through the schema, since a 135M model cannot choose tools), the approval, the server's
real result in the conversation, and the answer generated after it. A server that crashes mid-call and one
that hangs give an error result within the timeout, never a hang."""

from __future__ import annotations

import json
from dataclasses import replace
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from app.protocol.messages import LoadOptions, SamplingOptions
from app.tools.mcp_client import McpConnection
from app.tools.servers import ServerEntry, allowed_tools
from app.tools.tool_chat import ALWAYS, DENY, ONCE, ToolSet, answer_with_tools

MISBEHAVING = Path(__file__).with_name("misbehaving_server.py")
SAMPLING = SamplingOptions(max_tokens=40, temperature=0)  # the forced call is about 35 tokens
N_CTX = 1024


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # module-scoped: before any test's own HEARTH_HOME
        folder = tmp_path_factory.mktemp("tools-home")
        mp.setenv("HEARTH_HOME", str(folder))
        yield folder


@pytest.fixture(scope="module")
def client(home, bundled_model):
    from app.backends.client import EngineClient

    with EngineClient() as c:
        c.load(LoadOptions(model_path=str(bundled_model), n_ctx=N_CTX, n_threads=1))
        yield c


@pytest.fixture(scope="module")
def time_server(home):
    with McpConnection(ServerEntry("time", command="mcp-server-time", args=["--local-timezone", "UTC"])) as conn:
        yield conn


@pytest.fixture(scope="module")
def misbehaving(home):
    with McpConnection(ServerEntry("flaky", command=sys.executable, args=[str(MISBEHAVING)])) as conn:
        yield conn


def ask(client, tools, tool, approve, question="What time is it in Paris?"):
    messages = [{"role": "user", "content": question}]
    asked = []
    turn = answer_with_tools(client, messages, SAMPLING, tools, lambda *call: asked.append(call) or approve,
                             choice="required", forced=tool, max_rounds=1, n_ctx=N_CTX)
    return messages, asked, turn


def test_an_allowed_call_brings_the_servers_real_time_into_the_conversation_and_the_model_answers(client, time_server):
    tools = ToolSet([time_server], pinned={"get_current_time": {"timezone": "Europe/Paris"}})
    messages, asked, turn = ask(client, tools, "get_current_time", ALWAYS)
    assert asked == [("time", "get_current_time", {"timezone": "Europe/Paris"})]  # asked, with the arguments
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "get_current_time"
    result = json.loads(messages[2]["content"])  # what mcp-server-time answered, as the model read it
    assert result["timezone"] == "Europe/Paris"
    told = datetime.fromisoformat(result["datetime"])
    assert abs((told - datetime.now(timezone.utc)).total_seconds()) < 120 and told.utcoffset().total_seconds() > 0
    assert turn.calls[0].decision == ALWAYS and not turn.calls[0].is_error
    assert turn.done["completion_tokens"] > 0 and messages[3]["content"].strip()  # generated after the result
    assert allowed_tools("time") == {"get_current_time"}  # "always" is kept for this server's tool


def test_a_denied_call_never_reaches_the_server_and_the_model_still_answers(client, time_server):
    tools = ToolSet([time_server], pinned={"get_current_time": {"timezone": "Asia/Tokyo"}})
    messages, asked, turn = ask(client, tools, "get_current_time", DENY, "What time is it in Tokyo?")
    assert len(asked) == 1 and turn.calls[0].decision == DENY and turn.calls[0].seconds == 0
    assert messages[2] == {"role": "tool", "tool_call_id": messages[1]["tool_calls"][0]["id"],
                           "name": "get_current_time", "content": "The user did not allow this call."}
    assert messages[-1]["role"] == "assistant" and turn.done["completion_tokens"] > 0


def test_a_result_longer_than_a_quarter_of_the_context_is_cut_with_a_note(misbehaving, bundled_model):
    from app.backends.vocab import TokenCounter
    from app.tools.tool_chat import cut_result

    long = misbehaving.call("long_text", {"words": 20000}, timeout=30)
    counter = TokenCounter(bundled_model)  # the model's own tokens, as `hearth chat --tools` counts them
    try:
        text, note = cut_result(long.text, N_CTX, counter.count)
        assert note and text.endswith(note) and text.startswith("word0 word1")
        assert counter.count(text) <= N_CTX // 4 + counter.count(note) + 1 < counter.count(long.text)
        assert cut_result("word0 word1", N_CTX, counter.count) == ("word0 word1", "")
    finally:
        counter.close()


def test_a_server_that_hangs_gives_an_error_result_at_its_timeout(misbehaving):
    started = time.monotonic()
    result = misbehaving.call("hang", {}, timeout=1.5)
    assert result.is_error and "no result within 1.5 s" in result.text
    assert time.monotonic() - started < 3


def test_a_server_that_crashes_mid_call_gives_an_error_result_at_once(misbehaving):
    # After the hang test: a crash is the server's last act, so it comes last in this module.
    started = time.monotonic()
    result = misbehaving.call("crash", {}, timeout=30)
    assert result.is_error and "crashing as asked" in result.text  # its last words, from its stderr
    assert time.monotonic() - started < 5
    after = misbehaving.call("long_text", {"words": 3}, timeout=30)
    assert after.is_error and any(w in after.text for w in ("not running", "stopped", "Connection closed"))


def test_a_call_cut_off_by_the_token_limit_is_not_run_and_the_user_is_told(client, time_server):
    tools = ToolSet([time_server], pinned={"get_current_time": {"timezone": "Europe/Paris"}})
    messages = [{"role": "user", "content": "What time is it in Paris?"}]
    asked = []
    turn = answer_with_tools(client, messages, replace(SAMPLING, max_tokens=8), tools,
                             lambda *call: asked.append(call) or ALWAYS, choice="required", forced="get_current_time",
                             max_rounds=1, n_ctx=N_CTX)
    assert asked == [] and turn.calls == [] and turn.done["finish_reason"] == "length"
    assert "cut off by --max-tokens (8)" in turn.notice
