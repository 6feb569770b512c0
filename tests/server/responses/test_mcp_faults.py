"""MCP servers offered to API clients (`hearth serve --tools`) that fail the ways real ones do (issue 56): a tool that
hangs while its clients leave, a result bigger than the context, a model that calls more than max_tool_calls, a server
that crashes, one slow to start. A real `hearth serve` on the bundled model, a real MCP server
(tests/tools/misbehaving_server.py), the official openai client and raw HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.conftest import KEY, start_server, stop_server
from tests.helpers.paths import MISBEHAVING_MCP

# Every test here waits on a misbehaving MCP server (hangs, slow starts, crashes): slow by design, in the heavy
# tier, which CI runs after the suite.
pytestmark = [pytest.mark.slow, pytest.mark.heavy]

MISBEHAVING = MISBEHAVING_MCP
MODEL = "SmolLM2-135M-Instruct.Q4_1"
HEADERS = {"Authorization": f"Bearer {KEY}"}


def add_server(home: Path, name: str, *args: str, allow: tuple[str, ...] = ()) -> dict:
    """The misbehaving server in mcp.json as `name`, with these tools allowed for good; the server's env."""
    env = {"HEARTH_HOME": str(home)}
    subprocess.run([sys.executable, "-m", "app", "tools", "add", name, "--env", f"MISBEHAVING_TICKS={home / 'ticks.txt'}",
                    "--", sys.executable, str(MISBEHAVING), *args], check=True, env={**os.environ, **env},
                   capture_output=True)
    if allow:
        code = ("import sys\nfrom app.tools.servers import allow_always\n"
                "for tool in sys.argv[2:]:\n    allow_always(sys.argv[1], tool)")
        subprocess.run([sys.executable, "-c", code, name, *allow], check=True, env={**os.environ, **env})
    return env


def forced(tool: str, label: str = "bad", **extra) -> dict:
    """A Responses request whose first round must call `tool` of MCP server `label`, once and no more (a round of
    up to four calls would not fit its tokens, and a later round's call might be to `sleep`)."""
    return {"model": MODEL, "input": "Use the tool.", "temperature": 0, "max_output_tokens": 60,
            "tools": [{"type": "mcp", "server_label": label, "require_approval": "never"}],
            "tool_choice": {"type": "function", "name": tool}, "parallel_tool_calls": False, "max_tool_calls": 1,
            **extra}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server offering the misbehaving MCP server as 'bad', its tools allowed."""
    home = tmp_path_factory.mktemp("mcp-faults")
    env = add_server(home, "bad", allow=("sleep", "env", "sized", "huge", "tick", "crash"))
    proc, base = start_server("--api-key", KEY, "--tools", "bad", env=env, ctx=2048)
    yield proc, base, home
    stop_server(proc)


def _abandon(base: str, body: dict, started: threading.Event) -> None:
    """A streamed request whose client leaves once its MCP call is under way (the call starts right after its item
    is announced: the client waits a moment, then closes the connection)."""
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", f"{base}/responses", json={**body, "stream": True}, headers=HEADERS) as response:
            for line in response.iter_lines():
                if "response.mcp_call.in_progress" in line:
                    started.set()
                    time.sleep(2)
                    return  # the connection closes with the block


def _abandon_plain(base: str, body: dict) -> None:
    """A request that is not streamed, whose client gives up after 30 s (its call is under way by then: the eight
    requests' rounds take the one slot in turn, a few seconds each)."""
    try:
        httpx.post(f"{base}/responses", json=body, headers=HEADERS, timeout=30)
    except httpx.TimeoutException:
        pass


def test_hanging_tool_calls_of_departed_clients_never_hold_a_plain_request(served):
    """#56 B6: requests whose allowed tool sleeps, their clients gone once the call started: a plain chat request
    waited 56 s (the calls and the model's acquisition shared one executor), and the calls ran on to their 60 s
    timeout. Now the calls run on a pool of their own and stop with their request."""
    _, base, _ = served
    body = forced("sleep", input="Sleep.")
    started = [threading.Event() for _ in range(4)]
    clients = [threading.Thread(target=_abandon, args=(base, body, s)) for s in started]
    clients += [threading.Thread(target=_abandon_plain, args=(base, body)) for _ in range(4)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(120)
    assert all(s.is_set() for s in started)
    oai = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
    t0 = time.monotonic()
    plain = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8)
    plain_s = time.monotonic() - t0
    assert plain.choices[0].message.content is not None
    # The eight calls were stopped with their requests: a ninth call finds the pool free at once.
    t0 = time.monotonic()
    ran = oai.responses.create(**forced("env", input="Read HOME."))
    call_s = time.monotonic() - t0
    call = next(item for item in ran.output if item.type == "mcp_call")
    print(f"plain request after 8 abandoned hanging calls: {plain_s:.1f} s; a call after them: {call_s:.1f} s")
    assert plain_s < 15, plain_s
    assert call.status == "completed" and call_s < 20, (call, call_s)


def test_a_result_bigger_than_the_context_is_cut_as_hearth_chat_cuts_it(served):
    """#56 C9: a 1 MB result was a 400 "longer than the model's context" after the tool had run. The result is cut
    to a quarter of the context as `hearth chat` cuts it, and the item says so."""
    _, base, _ = served
    oai = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
    t0 = time.monotonic()
    answer = oai.responses.create(**forced("sized", input="Get 1000000 bytes."))
    seconds = time.monotonic() - t0
    call = next(item for item in answer.output if item.type == "mcp_call")
    assert call.status == "completed" and call.output.startswith("lorem ipsum dolor")
    assert "[Hearth cut this tool result: it was" in call.output and "25% of the model's context" in call.output
    assert len(call.output) < 2048 * 16
    assert answer.output[-1].type == "message" and answer.status in ("completed", "incomplete")
    print(f"{call.arguments} result: {seconds:.1f} s")
    assert seconds < 30, seconds


def test_a_result_past_what_hearth_reads_is_one_sentence_and_costs_no_memory(served):
    """#56 C9: a 50 MB result was a 500 after 32.6 s (the chat template refused a string past 32 MB), read whole
    first (the SDK's reader copied the line at every 64 KB). Hearth reads no more than a message's bound: the call
    fails at once with a sentence that says why, the model answers from it, and the server does not grow."""
    import psutil

    proc, base, _ = served
    server = psutil.Process(proc.pid)
    peak, done = [server.memory_info().rss], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], server.memory_info().rss)
            time.sleep(0.05)

    before = peak[0]
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    oai = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
    t0 = time.monotonic()
    try:
        answer = oai.responses.create(**forced("huge", input="Get it."))
    finally:
        done.set()
        sampler.join()
    seconds = time.monotonic() - t0
    call = next(item for item in answer.output if item.type == "mcp_call")
    assert call.status == "failed" and "MB Hearth reads of one message" in str(call.error), call
    assert answer.output[-1].type == "message"
    grown = (peak[0] - before) / 2**20
    print(f"50 MB result: {seconds:.1f} s, the server grew {grown:.0f} MB at most")
    assert seconds < 20 and grown < 100, (seconds, grown)


def _ticks(home: Path) -> int:
    path = home / "ticks.txt"
    count = len(path.read_text().splitlines()) if path.exists() else 0
    path.unlink(missing_ok=True)
    return count


def test_max_tool_calls_is_a_bound_on_the_calls_the_mcp_server_receives(served):
    """#56 D12: with max_tool_calls 1 and parallel calls allowed (the default), the MCP server received 2-4 calls; a
    forced call with no limit ran 17 calls against a stated maximum of 16 and ended without a message."""
    _, base, home = served
    oai = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=300)
    _ticks(home)
    for seed in range(3):
        one = oai.responses.create(**forced("tick", input="Tick as often as you can.", max_tool_calls=1,
                                            parallel_tool_calls=True, temperature=1.0, max_output_tokens=200),
                                   extra_body={"seed": seed})
        ran = [i for i in one.output if i.type == "mcp_call" and i.status == "completed"]
        assert _ticks(home) == 1 and len(ran) == 1, one.output
        refused = [i for i in one.output if i.type == "mcp_call" and i.status == "failed"]
        assert all("max_tool_calls" in str(i.error) for i in refused)
        assert one.output[-1].type == "message"
    unbounded = oai.responses.create(**forced("tick", input="Tick, tick, tick, again and again.",
                                              parallel_tool_calls=True, max_tool_calls=None, max_output_tokens=200,
                                              tools=[{"type": "mcp", "server_label": "bad", "require_approval":
                                                      "never", "allowed_tools": ["tick"]}]))
    assert _ticks(home) <= 16
    # It ends in words, or says the token limit cut it (the one rule for a cut answer, #54.6): never silently.
    assert unbounded.output[-1].type == "message" or (
        unbounded.status == "incomplete" and unbounded.incomplete_details.reason == "max_output_tokens")


def test_a_crashed_mcp_server_is_started_again_within_a_bound(served):
    """#56 D13: a server that crashed stayed dead until `hearth serve` restarted: every call said "Connection closed"
    while mcp_list_tools still listed its tools. It is started again when next needed."""
    _, base, _ = served
    oai = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
    crashed = oai.responses.create(**forced("crash", input="Crash."))
    call = next(item for item in crashed.output if item.type == "mcp_call")
    assert call.status == "failed"
    after = oai.responses.create(**forced("env", input="Read HOME."))
    listing = after.output[0]
    assert listing.type == "mcp_list_tools" and listing.error is None and {"env", "crash"} <= {t.name for t in
                                                                                               listing.tools}
    call = next(item for item in after.output if item.type == "mcp_call")
    assert call.status == "completed" and call.error is None, call


def test_restarts_are_bounded_and_said(tmp_path, monkeypatch):
    """A server that crashes at every call is started again at most MAX_RESTARTS times within RESTART_WINDOW_S; then
    its tools are not listed, and the listing and the calls say why."""
    import asyncio

    from app.server.api_tools import MAX_RESTARTS, ApiTools

    add_server(tmp_path, "bad", allow=("crash", "env"))
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    api = ApiTools(["bad"])
    try:
        api.wait_started(30)

        async def crash_until_given_up() -> list[str]:
            errors = []
            for _ in range(MAX_RESTARTS + 2):
                await api.settle(["bad"])
                errors.append((await api.call("bad", "crash", {}, 2048, None))[1])
            return errors

        errors = asyncio.run(crash_until_given_up())
        assert all("failed" in e or "stopped" in e for e in errors[:MAX_RESTARTS + 1]), errors
        assert "does not start it again for now" in errors[-1], errors
        assert api.tools("bad") == [] and "does not start it again for now" in api.problem("bad")
        assert Path(tmp_path / "logs" / "mcp-bad.log").read_text().count("crashing as asked") == MAX_RESTARTS + 1
    finally:
        api.close()


def test_a_server_slow_to_start_does_not_keep_serve_from_serving(tmp_path):
    """#56 E21: `hearth serve --tools a b` with one server slow to list its tools exited after 30 s. It serves, says
    which server is not ready, offers the ready one, and lists the slow one with the reason."""
    home = tmp_path / "home"
    add_server(home, "quick", allow=("env",))
    env = add_server(home, "slow", "--start-after", "120")
    t0 = time.monotonic()
    proc, base = start_server("--api-key", KEY, "--tools", "quick", "slow", env=env)
    try:
        started_s = time.monotonic() - t0
        said = Path(proc.log_path).read_text()
        assert "The MCP server 'slow' is not ready yet" in said and "quick" not in said, said
        assert started_s < 45, started_s
        oai = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
        quick = oai.responses.create(**forced("env", label="quick", input="Read HOME."))
        assert next(i for i in quick.output if i.type == "mcp_call").status == "completed"
        slow = oai.responses.create(model=MODEL, input="Hi", max_output_tokens=8,
                                    tools=[{"type": "mcp", "server_label": "slow", "require_approval": "never"}])
        listing = slow.output[0]
        assert listing.type == "mcp_list_tools" and listing.tools == [] and "not ready yet" in listing.error
    finally:
        stop_server(proc)
