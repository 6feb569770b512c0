"""Text for a terminal: control characters shown as escapes, never sent as they are.

Document text, file names, model names and server names come from anyone. Sent raw, ESC and OSC sequences clear
the screen, retitle the window or (OSC 52) set the clipboard, C1 characters do the same on terminals that take
8-bit controls, bidi overrides make a name read backwards, and a newline in a name splits a line of a listing.
So every line the command line prints goes through here, as undecodable bytes in names already come out as
\\xNN (app/docs/indexer.py display_path): guard() on the CLI's streams for all of it (keeping the line breaks and
tabs the output is made of), and one_line() on each name or field that must stay on its line.

Escapes are Python's and JSON's at once: C0 characters as \\x1b (JSON output never holds them raw: json.dumps
escapes them itself), DEL, C1 and bidi controls as \\u009b, so a --json answer stays valid JSON.
"""

from __future__ import annotations

import re
from typing import TextIO

# C0 but tab, line feed and carriage return (the output's own layout); DEL; C1; bidi marks, embeddings, overrides
# and isolates; the line and paragraph separators some terminals take for a line break.
_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x20 else f"\\u{code:04x}")


def safe(text: str) -> str:
    """Text whose control characters are escapes; its line breaks and tabs stay (a block of output)."""
    return _UNSAFE.sub(_escape, text)


def one_line(text: object) -> str:
    """A name or a field for one line of output: line breaks and tabs are escaped too."""
    return _UNSAFE_IN_LINE.sub(_escape, str(text))


class _Guarded:
    """A text stream that escapes what it is given (safe()) and is otherwise the stream it wraps."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(safe(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def guard(stream: TextIO) -> TextIO:
    """The stream, escaping control characters in everything written to it (once: a guarded one is kept)."""
    return stream if isinstance(stream, _Guarded) else _Guarded(stream)
