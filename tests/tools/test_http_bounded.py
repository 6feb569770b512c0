"""What an MCP server over HTTP answers, as Hearth reads it (app/tools/http_bounded.py): each JSON answer bounded as a
stdio line is (#56 C9's sibling: the SDK read a JSON answer whole, however large). A real server over streamable
HTTP (tests/tools/misbehaving_server.py --http)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from app.tools.mcp_client import McpConnection
from app.tools.servers import ServerEntry
from app.tools.stdio_lines import MAX_MESSAGE_BYTES
from tests.helpers.paths import MISBEHAVING_MCP


@pytest.fixture
def http_server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(MISBEHAVING_MCP), "--http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline and proc.poll() is None, "the HTTP MCP server did not start"
            time.sleep(0.1)
    yield url
    proc.kill()
    proc.wait(10)


def test_an_answer_past_the_bound_is_one_sentence_and_the_connection_goes_on(http_server):
    with McpConnection(ServerEntry("web", url=http_server)) as conn:
        before = psutil.Process().memory_info().rss
        started = time.monotonic()
        result = conn.call("sized", {"size": 30_000_000}, timeout=30)
        grew_mb = (psutil.Process().memory_info().rss - before) / 2**20
        assert result.is_error, result.text[:200]
        assert result.text.startswith("The tool 'sized' of MCP server 'web' failed: its answer was "), \
            result.text[:300]
        assert f"more than the {MAX_MESSAGE_BYTES // 2**20} MB Hearth reads of one message" in result.text
        assert grew_mb < 3 * MAX_MESSAGE_BYTES / 2**20, grew_mb  # read up to the bound, not the 30 MB and its copies
        assert time.monotonic() - started < 20
        assert conn.call("env", {"name": "HOME"}).text  # the connection is unharmed
        within = conn.call("sized", {"size": 1_000_000})
        assert not within.is_error and len(within.text) == 1_000_000


def test_an_answer_without_its_length_is_counted_as_it_arrives_and_stopped_at_the_bound():
    """A server may send a JSON answer chunked, without a Content-Length: its bytes are counted as they come."""
    import anyio
    import httpx2

    from app.tools.http_bounded import AnswerTooLarge, _Bounded

    read = []

    class Chunks(httpx2.AsyncByteStream):
        async def __aiter__(self):
            for _ in range(64):  # 64 MB, a megabyte at a time
                yield b"x" * 2**20

    async def consume():
        async for chunk in _Bounded(Chunks(), None):
            read.append(len(chunk))

    with pytest.raises(AnswerTooLarge, match=f"more than the {MAX_MESSAGE_BYTES // 2**20} MB Hearth reads"):
        anyio.run(consume)
    assert sum(read) <= MAX_MESSAGE_BYTES
