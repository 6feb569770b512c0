"""Copy a GGUF file with edited metadata, for tests that need a model whose vocabulary or chat template differs.

Only metadata changes; tensors are copied byte for byte, so the copy loads and runs like the original.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import gguf

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


def copy_with_fields(src: str | Path, dst: str | Path, edits: dict[str, Callable],
                     add: dict[str, object] | None = None) -> Path:
    """Write dst = src with each `edits` key's value replaced by its edit(old value) (DROP: left out), and
    the `add` keys (bool, int, float or str values) written as new ones."""
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(dst), arch=arch, endianess=reader.endianess)
    add = dict(add or {})
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer adds these itself
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name in add:
            value = add.pop(field.name)
        elif field.name in edits:
            value = edits[field.name](value)
            if value is DROP:
                continue
        writer.add_key_value(field.name, value, vtype, sub_type=sub)
    for name, value in add.items():
        vtype = (gguf.GGUFValueType.BOOL if isinstance(value, bool) else gguf.GGUFValueType.INT32
                 if isinstance(value, int) else gguf.GGUFValueType.FLOAT32 if isinstance(value, float)
                 else gguf.GGUFValueType.STRING)
        writer.add_key_value(name, value, vtype)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    return Path(dst)


def swap_tokens(src: str | Path, dst: str | Path, a: int, b: int) -> Path:
    """A copy whose tokens a and b trade places: same set of strings, different ids."""
    def edit(tokens: list[str]) -> list[str]:
        tokens[a], tokens[b] = tokens[b], tokens[a]
        return tokens

    return copy_with_tokens(src, dst, edit)
