"""Copy a GGUF file with edited metadata, for tests that need a model whose vocabulary or chat template differs.

Only metadata changes; tensors are copied byte for byte, so the copy loads and runs like the original.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Callable


TOKENS_KEY = "tokenizer.ggml.tokens"
TEMPLATE_KEY = "tokenizer.chat_template"


def copy_with_tokens(src: str | Path, dst: str | Path, edit: Callable[[list[str]], list[str]]) -> Path:
    """Write dst = src with tokenizer.ggml.tokens replaced by edit(tokens)."""
    return copy_with_field(src, dst, TOKENS_KEY, lambda tokens: edit(list(tokens)))


def copy_with_template(src: str | Path, dst: str | Path, template: str) -> Path:
    """Write dst = src with another chat template."""
    return copy_with_field(src, dst, TEMPLATE_KEY, lambda _old: template)


DROP = object()  # what an edit returns to leave the key out of the copy


def copy_with_field(src: str | Path, dst: str | Path, key: str, edit: Callable) -> Path:
    """Write dst = src with the metadata value at `key` replaced by edit(old value) (DROP: left out)."""
    return copy_with_fields(src, dst, {key: edit})


def copy_without(src: str | Path, dst: str | Path, *keys: str) -> Path:
    """Write dst = src without the given metadata keys (a model without a chat template, ...)."""
    return copy_with_fields(src, dst, {key: lambda _old: DROP for key in keys})


# The value types' codes (GGUF's own numbering) and their struct formats; STRING and ARRAY are read apart.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_TYPE_OF = {bool: 7, int: 5, float: 6, str: _STRING}


def copy_with_fields(src: str | Path, dst: str | Path, edits: dict[str, Callable],
                     add: dict[str, object] | None = None) -> Path:
    """Write dst = src with each `edits` key's value replaced by its edit(old value) (DROP: left out), and
    the `add` keys (bool, int, float or str values) written as new ones.

    Byte level: the other keys and the tensor table are copied as they are and the tensor data is streamed,
    so a copy takes about a second. (gguf.GGUFReader turns the 49,152-token vocabulary into numpy objects
    first: 8-16 s a copy, which several tests paid in their setup.) Only the edited values are decoded; a
    value keeps its type, a list of strings stays one."""
    add = dict(add or {})
    with open(src, "rb") as f:
        head = f.read(24)
        magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", head)
        if magic != b"GGUF" or version not in (2, 3):
            raise ValueError(f"{src} is not a little-endian GGUF v2/v3 file")
        reader = _Reader(f)
        kvs: list[bytes] = []
        alignment = 32
        for _ in range(n_kv):
            start = reader.pos
            key = reader.string()
            vtype = reader.u32()
            if key in edits or key in add:
                value, sub = reader.value(vtype)
                if key in add:
                    value = add.pop(key)  # in the file's own type
                else:
                    value = edits[key](value)
                    if value is DROP:
                        continue
                kvs.append(_encode_key(key) + struct.pack("<I", vtype) + _encode(vtype, value, sub))
                continue
            if key == "general.alignment":
                alignment = int(reader.value(vtype)[0])
            else:
                reader.skip_value(vtype)
            kvs.append(reader.raw(start, reader.pos))
        for key, value in add.items():
            vtype = _TYPE_OF[type(value)]
            kvs.append(_encode_key(key) + struct.pack("<I", vtype) + _encode(vtype, value, None))
        tensors_at = reader.pos
        for _ in range(n_tensors):
            reader.string()
            n_dims = reader.u32()
            reader.read(8 * n_dims + 4 + 8)
        tensor_table = reader.raw(tensors_at, reader.pos)
        data_at = -(-reader.pos // alignment) * alignment
        with open(dst, "wb") as out:
            out.write(struct.pack("<4sIQQ", magic, version, n_tensors, len(kvs)))
            for kv in kvs:
                out.write(kv)
            out.write(tensor_table)
            out.write(b"\0" * (-out.tell() % alignment))
            f.seek(data_at)
            shutil.copyfileobj(f, out, 16 << 20)  # tensor offsets count from the data's start: unchanged
    return Path(dst)


class _Reader:
    """Sequential reads of a GGUF header, keeping what was read so a span can be copied as it is."""

    BASE = 24  # the fixed header before the first key: where reading starts

    def __init__(self, f):
        self.f, self.pos, self.buf = f, self.BASE, bytearray()

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise ValueError("the GGUF header ends early")
        self.buf += data
        self.pos += n
        return data

    def raw(self, start: int, end: int) -> bytes:
        return bytes(self.buf[start - self.BASE:end - self.BASE])

    def u32(self) -> int:
        return struct.unpack("<I", self.read(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.read(8))[0]

    def string(self) -> str:
        return self.read(self.u64()).decode("utf-8", errors="surrogateescape")

    def value(self, vtype: int):
        """(value, the array's item type or None)."""
        if vtype == _STRING:
            return self.string(), None
        if vtype == _ARRAY:
            sub, count = self.u32(), self.u64()
            return [self.value(sub)[0] for _ in range(count)], sub
        fmt = _SCALARS[vtype]
        return struct.unpack("<" + fmt, self.read(struct.calcsize(fmt)))[0], None

    def skip_value(self, vtype: int) -> None:
        if vtype == _STRING:
            self.read(self.u64())
        elif vtype == _ARRAY:
            sub, count = self.u32(), self.u64()
            if sub in _SCALARS:
                self.read(struct.calcsize(_SCALARS[sub]) * count)
            else:
                for _ in range(count):
                    self.skip_value(sub)
        else:
            self.read(struct.calcsize(_SCALARS[vtype]))


def _encode_key(key: str) -> bytes:
    data = key.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _encode(vtype: int, value, sub) -> bytes:
    if vtype == _STRING:
        data = value.encode("utf-8", errors="surrogateescape")
        return struct.pack("<Q", len(data)) + data
    if vtype == _ARRAY:
        items = list(value)
        if sub is None:
            sub = _TYPE_OF[type(items[0])] if items else _STRING
        return struct.pack("<IQ", sub, len(items)) + b"".join(_encode(sub, item, None) for item in items)
    return struct.pack("<" + _SCALARS[vtype], value)


def swap_tokens(src: str | Path, dst: str | Path, a: int, b: int) -> Path:
    """A copy whose tokens a and b trade places: same set of strings, different ids."""
    def edit(tokens: list[str]) -> list[str]:
        tokens[a], tokens[b] = tokens[b], tokens[a]
        return tokens

    return copy_with_tokens(src, dst, edit)
