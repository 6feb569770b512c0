"""Hearth's MCP tools in /v1/chat/completions, only where the user asked for it (#45: `hearth serve --tools time
--tools-in-chat`), with the official `openai` client and a real MCP server (mcp-server-time, from PyPI)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import openai
import pytest

from tests.server.conftest import KEY, start_server, stop_server

pytestmark = pytest.mark.skipif(shutil.which("mcp-server-time") is None, reason="mcp-server-time is not installed")

TIME_TOOL = {"type": "mcp", "server_label": "time", "require_approval": "never"}


def add_time_server(home) -> dict:
    env = {"HEARTH_HOME": str(home)}
    subprocess.run([sys.executable, "-m", "app", "tools", "add", "time", "--", "mcp-server-time",
                    "--local-timezone", "UTC"], check=True, env={**os.environ, **env}, capture_output=True)
    return env


def allow_all(home, tools) -> None:
    """As "Always" in the window, while the server runs (its allow-list is read at each call)."""
    from app.tools.servers import allow_always

    old = os.environ.get("HEARTH_HOME")
    os.environ["HEARTH_HOME"] = str(home)
    try:
        for tool in tools:
            allow_always("time", tool)
    finally:
        os.environ.pop("HEARTH_HOME") if old is None else os.environ.__setitem__("HEARTH_HOME", old)


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
def test_chat_completions_run_the_offered_mcp_tools_only_where_the_user_asked(tmp_path, model_name):
    env = add_time_server(tmp_path / "home")
    ask = dict(model=model_name, messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
               tools=[TIME_TOOL], tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=120,
               extra_body={"max_tool_calls": 1})
    # --tools alone offers the server to /v1/responses: a chat request naming it is told how to get it.
    proc, base = start_server("--api-key", KEY, "--tools", "time", env=env)
    try:
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(**ask)
        assert err.value.body["code"] == "unsupported_tool" and "--tools-in-chat" in err.value.body["message"]
    finally:
        stop_server(proc)

    proc, base = start_server("--api-key", KEY, "--tools", "time", "--tools-in-chat", env=env, ctx=4096)
    try:
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
        # Not allowed for good: the call does not run, the model is told why and answers in words.
        refused = client.chat.completions.create(**ask)
        message = refused.choices[0].message
        (call,) = message.model_extra["mcp_calls"]  # max_tool_calls: one, then it must answer in words
        assert all(c["server_label"] == "time" and c["output"] is None and "has not allowed" in c["error"]
                             for c in [call])
        assert not message.tool_calls and refused.choices[0].finish_reason in ("stop", "length")

        allow_all(tmp_path / "home", ["get_current_time", "convert_time"])
        ran = client.chat.completions.create(**ask)
        message = ran.choices[0].message
        (call,) = message.model_extra["mcp_calls"]
        assert call["name"] in ("get_current_time", "convert_time") and call["error"] is None
        assert json.loads(call["output"])  # what mcp-server-time answered: a JSON object with the time
        assert not message.tool_calls and ran.choices[0].finish_reason in ("stop", "length")
        # Two rounds (the call, then the answer with its output) in one usage.
        plain = client.chat.completions.create(model=model_name, messages=ask["messages"], max_tokens=8)
        assert ran.usage.prompt_tokens > 2 * plain.usage.prompt_tokens

        # Streamed: the ran call is a chunk of its own, before the answer's words.
        chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        calls = [d.model_extra["mcp_calls"][0] for d in deltas if (d.model_extra or {}).get("mcp_calls")]
        # The same call as unstreamed (greedy, the same request); its output is the time, which moved on.
        assert [(c["name"], c["arguments"]) for c in calls] == [(call["name"], call["arguments"])]
        assert calls[0]["error"] is None and json.loads(calls[0]["output"])
        text = "".join(d.content or "" for d in deltas)
        assert text.strip() and [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
        assert chunks[-1].usage.completion_tokens > 0

        # A client's own function beside the server's tools comes back to it as a tool call.
        weather = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                    "parameters": {"type": "object",
                                                                   "properties": {"city": {"type": "string"}},
                                                                   "required": ["city"]}}}
        own = client.chat.completions.create(**{**ask, "tools": [TIME_TOOL, weather],
                                                "tool_choice": {"type": "function",
                                                                "function": {"name": "get_weather"}}})
        assert own.choices[0].finish_reason == "tool_calls"
        assert own.choices[0].message.tool_calls[0].function.name == "get_weather"
        assert own.choices[0].message.model_extra["mcp_calls"] == []
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(**{**ask, "tools": [{"type": "mcp", "server_label": "other"}]})
        assert err.value.body["code"] == "unknown_mcp_server"
    finally:
        stop_server(proc)


def test_tools_in_chat_without_tools_is_one_sentence_before_any_model_loads():
    proc = subprocess.run([sys.executable, "-m", "app", "serve", "--tools-in-chat", "--port", "9"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--tools-in-chat offers the MCP servers of --tools" in proc.stderr


def test_a_streamed_answer_after_mcp_calls_reads_as_the_whole_one():
    """The model says something, calls a server's tool, and answers again with its output: the whole chat completion
    joins the two rounds' words with a blank line, and the streamed one ran them together ("Let me check.It is
    noon."). The rounds' events are fed to the dialect's stream as the Responses rounds make them."""
    import asyncio

    from app.protocol import messages as P
    from app.server.openai.chat_mcp import ChatWithMcp
    from app.server.responses.endpoints import OutputItems
    from app.server.tools import CallReader

    output = OutputItems(None, CallReader(["get_current_time"]), {"get_current_time": "time"})

    class Rounds:  # AnswerRounds' part the stream reads: each round's events, then the usage of all of them
        def __init__(self):
            self.output, self.done = output, None

        async def rounds(self):
            for piece in ["Let me check.", '<tool_call>\n{"name": "get_current_time", "arguments": {}}\n</tool_call>',
                          ""]:
                output.feed(piece)
                yield output.take_events()
            output.ran(output.pending[0], '{"time": "12:00"}', None)
            yield output.take_events()
            output.next_round(read_calls=False)
            for piece in ["It is", " noon.", ""]:
                output.feed(piece)
                yield output.take_events()
            self.done = P.Done({"finish_reason": "stop", "prompt_tokens": 30, "completion_tokens": 20})

    async def streamed() -> list[dict]:
        raw = b"".join([chunk async for chunk in ChatWithMcp._chunks({"id": "chatcmpl-1"}, Rounds(), False)])
        return [json.loads(line[6:]) for line in raw.decode().splitlines()
                if line.startswith("data: ") and line != "data: [DONE]"]

    deltas = [chunk["choices"][0]["delta"] for chunk in asyncio.run(streamed())]
    whole = "\n\n".join(t for t in (i["content"][0]["text"] for i in output.items if i["type"] == "message") if t)
    assert "".join(d.get("content") or "" for d in deltas) == whole == "Let me check.\n\nIt is noon."
    assert [c["name"] for d in deltas for c in d.get("mcp_calls", [])] == ["get_current_time"]
