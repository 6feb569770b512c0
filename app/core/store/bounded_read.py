"""The one bound on reading user files: every reader of a file a user gives Hearth (a document, a chat export, an
MCP config, a zip member, a PDF stream) counts the bytes it actually reads, unpacked bytes included, against a
Budget, and stops at its limit with one sentence.

A size on disk says little: a 990 KB DOCX unpacked to 340 MB, and a zip header's sizes are whatever its writer
put there. So the limits here are checked on the bytes that come out of a decompressor as they come, never on
what a header claims, and a reader stops at the first byte past the limit instead of finding out afterwards.
The same Budget carries the cancel flag, checked at each chunk, so a long file can be stopped inside it.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import zipfile
from typing import Any, BinaryIO

from app.core.errors import HearthError
from app.core.units import human_size

# What one file may unpack to in all (its members and streams together): the indexer's limit for a file on disk,
# so a packed file can never cost more than an unpacked one. 64 MiB of text is about 16M tokens.
MAX_UNPACKED_BYTES = 64 * 2**20
# A zip with more entries than this is not an office document: each entry costs zipfile a Python object.
MAX_ZIP_MEMBERS = 10_000
# JSON nested deeper than this is not a chat or a config: Python's parser and every walk over the result
# recurse, and a few hundred KB of "[[[[" would end in RecursionError.
MAX_JSON_DEPTH = 64
CHUNK = 1 << 16  # bytes read at a time: the cancel flag is looked at this often


class TooBig(HearthError):
    """A file that unpacks (or reads) to more than its reader may take; the message is one sentence."""


class Cancelled(Exception):
    """The reader was asked to stop (its cancel flag was set); not a problem of the file."""


class Budget:
    """Bytes a reader may still take from one file, and the flag that stops it.

    name: the file as the user knows it (it starts every sentence); limit: bytes, unpacked ones included.
    """

    def __init__(self, name: str, limit: int = MAX_UNPACKED_BYTES, cancel: threading.Event | None = None):
        self.name, self.limit, self.cancel = name, limit, cancel
        self.used = 0

    def take(self, n: int, what: str = "") -> None:
        """Count n more bytes read; TooBig once past the limit, Cancelled once the flag is set."""
        self.check()
        self.used += n
        if self.used > self.limit:
            raise self.too_big(what)

    def too_big(self, what: str = "") -> TooBig:
        """The sentence for a file past the limit (a library's own limit, where it stopped first, says the same)."""
        inside = f" ({what})" if what else ""
        return TooBig(f"{self.name} unpacks to more than {human_size(self.limit)}{inside}, more than Hearth "
                      "reads from one file; it was left out.")

    def check(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled()


def read_file(path: str | os.PathLike, budget: Budget) -> bytes:
    """A file's bytes, read a chunk at a time against the budget: a file that grows while it is read, or one
    whose size the file system does not know (a FIFO, /proc), cannot take more than the limit."""
    parts = []
    with open(path, "rb") as fh:
        while True:
            part = fh.read(CHUNK)
            if not part:
                return b"".join(parts)
            if budget.used + len(part) > budget.limit:
                raise TooBig(f"{budget.name} is larger than {human_size(budget.limit)}, more than Hearth reads "
                             "from such a file; it was not read.")
            budget.take(len(part))
            parts.append(part)


# What a parser may hold at once of one zip member: the XML of one paragraph or table, or a part read whole (the
# styles, the relationships). A tree costs about 16 times its XML (a 62 MB paragraph of 2.5M runs took 1 GB), so
# this keeps one piece within about 150 MB; the largest real pieces (a long formatted table) are a few MB.
MAX_HELD_BYTES = 8 * 2**20


class _Counted:
    """A read-only stream over a zip member that counts what comes out of the decompressor: against the file's
    budget, and (held_limit) what its parser has read since it last let go of what it parsed."""

    def __init__(self, raw: BinaryIO, budget: Budget, what: str, held_limit: int | None = None):
        self.raw, self.budget, self.what, self.held_limit = raw, budget, what, held_limit
        self.held = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(CHUNK if n is None or n < 0 or n > CHUNK else n)
        self.budget.take(len(data), self.what)
        self.held += len(data)
        if self.held_limit is not None and self.held > self.held_limit:
            raise TooBig(f"{self.budget.name} has more than {human_size(self.held_limit)} of XML in one piece of its "
                         f"{self.what} (one paragraph, table or part), more than Hearth holds at once; it was left out.")
        return data

    def release(self) -> None:
        """The parser let go of what it parsed so far: only what it reads next counts towards held_limit."""
        self.held = 0


def open_zip(data: bytes, budget: Budget) -> zipfile.ZipFile:
    """A zip archive from bytes, after the entries of its central directory are counted (walked as zipfile will
    walk them, before it makes an object per entry: the end record's count is whatever its writer put there).
    zipfile.BadZipFile for anything that is not a zip."""
    count = zip_entry_count(data, MAX_ZIP_MEMBERS)
    if count is not None and count > MAX_ZIP_MEMBERS:
        raise TooBig(f"{budget.name} is a zip of more than {MAX_ZIP_MEMBERS:,} parts, more than any document has; "
                     "it was left out.")
    budget.check()
    import io

    return zipfile.ZipFile(io.BytesIO(data))


def open_member(archive: zipfile.ZipFile, member: str, budget: Budget, held_limit: int | None = None) -> _Counted:
    """A stream of one member's unpacked bytes, counted as they are read (KeyError when there is none)."""
    return _Counted(archive.open(member), budget, member, held_limit)


def read_member(archive: zipfile.ZipFile, member: str, budget: Budget, most: int | None = None) -> bytes:
    """One member's bytes, whole: at most `most` of them (TooBig past it), counted against the budget."""
    stream, parts = open_member(archive, member, budget, most), []
    while True:
        part = stream.read(CHUNK)
        if not part:
            return b"".join(parts)
        parts.append(part)


_CENTRAL_ENTRY = struct.Struct("<4s24xHHH12x")  # 46 bytes: signature; name, extra and comment lengths


def zip_entry_count(data: bytes, most: int) -> int | None:
    """The entries of a zip's central directory, walked from where zipfile will read it (the end record's size
    and place, ZIP64's too) and counted up to most + 1; None when there is no end record (zipfile then says what
    is wrong). A walk that meets something other than an entry stops there: zipfile refuses such a zip."""
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - 65_557))
    if at < 0 or at + 22 > len(data):
        return None
    (size_cd,) = struct.unpack_from("<I", data, at + 12)
    end = at
    locator = at - 20
    if locator >= 0 and data[locator:locator + 4] == b"PK\x06\x07":
        end64 = locator - 56  # zipfile reads the ZIP64 end record just before its locator
        if end64 >= 0 and data[end64:end64 + 4] == b"PK\x06\x06":
            (size_cd,) = struct.unpack_from("<Q", data, end64 + 40)
            end = end64
    start = end - size_cd
    if start < 0:
        return None
    count, pos = 0, start
    while pos - start < size_cd and count <= most and pos + 46 <= len(data):
        signature, name, extra, comment = _CENTRAL_ENTRY.unpack_from(data, pos)
        if signature != b"PK\x01\x02":
            break
        count += 1
        pos += 46 + name + extra + comment
    return count


def load_json(text: str | bytes, name: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON from a user's file: ValueError (json's own, with its line and column) for bad JSON, TooBig for JSON
    nested deeper than max_depth, never RecursionError."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise _too_deep(name, max_depth) from None
    if depth_over(data, max_depth):
        raise _too_deep(name, max_depth)
    return data


def _too_deep(name: str, max_depth: int) -> TooBig:
    return TooBig(f"{name} is nested more than {max_depth} levels deep, which no file Hearth reads is; "
                  "it was not read.")


def depth_over(data: Any, max_depth: int) -> bool:
    """Whether lists and objects nest deeper than max_depth in data; a walk with its own stack, not recursion."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
