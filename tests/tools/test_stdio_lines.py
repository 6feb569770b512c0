"""What a stdio MCP server writes, as Hearth reads it (app/tools/stdio_lines.py): whole lines, each bounded, and the
end of the output told to its connection. Real servers (tests/tools/misbehaving_server.py) where it matters, and the
reader itself on bytes for the shapes of answers the SDKs write."""

from __future__ import annotations

import inspect
import json
import sys
import time

import anyio
import psutil
import pytest

from app.tools import stdio_lines
from app.tools.mcp_client import McpConnection
from app.tools.servers import ServerEntry
from app.tools.stdio_lines import MAX_MESSAGE_BYTES, BoundedLines
from tests.helpers.paths import MISBEHAVING_MCP


def misbehaving() -> ServerEntry:
    return ServerEntry("bad", command=sys.executable, args=[str(MISBEHAVING_MCP)])


def test_the_sdk_still_builds_its_reader_by_the_name_hearth_replaces():
    import mcp.client.stdio as sdk_stdio

    assert "TextReceiveStream(process.stdout" in inspect.getsource(sdk_stdio.stdio_client)


def test_a_result_past_the_bound_is_one_sentence_at_once_and_the_connection_goes_on():
    """#56 C9: a result was read whole, however big: the SDK's reader copied the line it was building at every
    64 KB (a 20 MB result took 12.8 s and +190 MB; a 50 MB one ran out its 60 s timeout). Now the call says in one
    sentence that the answer was more than Hearth reads, at once, and the next call works."""
    with McpConnection(misbehaving()) as conn:
        started = time.monotonic()
        result = conn.call("sized", {"size": 30_000_000}, timeout=10)
        seconds = time.monotonic() - started
        assert result.is_error and f"more than the {MAX_MESSAGE_BYTES // 2**20} MB Hearth reads of one message" \
            in result.text, result.text
        assert result.text.startswith("The tool 'sized' of MCP server 'bad' failed: its answer was ")
        assert seconds < 5, seconds
        assert conn.alive and conn.call("env", {"name": "HOME"}).text  # the connection is unharmed
        within = conn.call("sized", {"size": 1_000_000})  # within the bound: whole (the cut is the caller's)
        assert not within.is_error and len(within.text) == 1_000_000
    assert "was not read: more than the" in conn.log_path.read_text()


def test_a_server_that_dies_while_idle_takes_its_connection_down_at_once():
    """#56 D13: a server that died between calls left its connection alive, its tools listed, until a call got
    "Connection closed". Now the end of its output takes the connection down, so its keepers start it again."""
    with McpConnection(misbehaving()) as conn:
        server = next(p for p in psutil.Process().children(recursive=True)
                      if str(MISBEHAVING_MCP) in " ".join(p.cmdline()))
        server.kill()
        deadline = time.monotonic() + 5
        while conn.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not conn.alive
        assert "is not running" in conn.call("env", {"name": "HOME"}).text


class _Bytes:
    """A byte stream as the SDK's process stdout is, in the chunks given."""

    def __init__(self, chunks: list[bytes]):
        self.chunks = list(chunks)

    async def receive(self) -> bytes:
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)


class _Seen:
    def __init__(self):
        self.ended, self.notes = False, []

    def output_ended(self) -> None:
        self.ended = True

    def note(self, text: str) -> None:
        self.notes.append(text)


def read(chunks: list[bytes]) -> tuple[list[str], _Seen]:
    seen = _Seen()

    async def main() -> list[str]:
        stdio_lines.watching.set(seen)
        return [chunk async for chunk in BoundedLines(_Bytes(chunks))]

    return anyio.run(main), seen


def test_lines_come_whole_whatever_the_chunks():
    lines, seen = read([b'{"a": 1}\n{"b": ', b'"\xc3', b'\xa9"}\n{"c"', b": 3}\n"])
    assert lines == ['{"a": 1}\n', '{"b": "\u00e9"}\n', '{"c": 3}\n'] and seen.ended


@pytest.mark.parametrize("head, tail, answers", [
    (b'{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "', b'"}]}}', b"7"),
    (b'{"id":"q-1","jsonrpc":"2.0","result":{"content":[{"type":"text","text":"', b'"}]}}', b'"q-1"'),
    (b'{"result":{"content":[{"type":"text","text":"', b'"}]},"jsonrpc":"2.0","id":12}', b"12"),
    (b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"', b'"}}', None),
])
def test_a_line_past_the_bound_answers_its_request_with_an_error_and_is_never_kept(head, tail, answers):
    body = b"x" * (64 * 1024)
    chunks = [head] + [body] * (MAX_MESSAGE_BYTES // len(body) + 2) + [tail + b'\n{"after": true}\n']
    lines, seen = read(chunks)
    assert lines[-1] == '{"after": true}\n'
    if answers is None:  # a notification: nothing waits for it; it is only logged
        assert lines == ['{"after": true}\n'] and "not an answer Hearth could place" in seen.notes[0]
        return
    error = json.loads(lines[0])
    assert error["id"] == json.loads(answers) and "Hearth reads of one message" in error["error"]["message"]
    assert len(lines) == 2 and len(seen.notes) == 1
