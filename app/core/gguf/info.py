"""Read a GGUF file's metadata and tensor table without loading any tensor.

A small reader of its own rather than gguf.GGUFReader: that one maps the whole
file and materialises every array (the tokenizer's 150k strings) as numpy
objects, and it trusts the lengths in the header. Here every length is checked
against what is left of the file and against fixed caps before anything is
read, big arrays are skipped instead of kept, and the whole header may not
exceed MAX_HEADER_BYTES, so a hostile or truncated file costs one clear
ModelFileError, never a hang or gigabytes of reading.

The rules are llama.cpp's own (ggml/src/gguf.cpp), so a file this reader
accepts is one llama.cpp will open, and nothing else is listed as a model:
keys non-empty and unique, tensor names shorter than 64 bytes and unique, at
most 4 dimensions, rows a whole number of blocks, and each tensor's data where
the one before it ends (padded to the alignment). So every tensor costs its
entry in the header and its bytes in the data section, and the counts are
bounded by the file's size before anything is read; the fixed caps on top
(MAX_KV, MAX_TENSORS, KEEP_TOTAL_ITEMS) keep any header within about 2 s and
300 MB of Python objects.
"""

from __future__ import annotations

import io
import re
import struct
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import gguf

from app.core.gguf.chat_formats import MARKERS
from app.core.errors import ModelFileError
from app.core.gguf.modelfile import open_model_file, version_problem
from app.core.gguf.quant_types import SEED_NAMES

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
# The biggest real headers (256k-token vocabularies with merges) are tens of MB.
MAX_HEADER_BYTES = 512 * 2**20
MAX_STRING_BYTES = 64 * 2**20
# Bytes read at a time while skipping strings: the first read of a skip is small (an array of 300 short strings
# must not read a megabyte and seek back: 16,000 such keys spent 2.5 s so), each further one twice the last.
_SKIP_FIRST, _SKIP_CHUNK = 1 << 12, 1 << 20
_U64 = struct.Struct("<Q")
# Real files have a few dozen keys; llama.cpp compares every key with every other (a quadratic check).
MAX_KV = 16_384
# llama.cpp refuses a file with tensors its architecture does not create, and the largest create a few thousand
# (DeepSeek-V3 about 1,100): 32,768 is far past any model, and a few MB of TensorInfo read in well under 1 s.
MAX_TENSORS = 32_768
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_TENSOR_NAME = 63  # GGML_MAX_NAME - 1: llama.cpp refuses a longer name
# The least a key-value entry takes in the file: a one-byte key (8 + 1), its type (4), a one-byte value.
MIN_KV_BYTES = 14
# The least a tensor entry takes: name length (8), dimension count (4), type (4), offset (8).
MIN_TENSOR_BYTES = 24
# Arrays longer than this are counted, not kept (vocabularies, merges, scores).
KEEP_ARRAY_ITEMS = 256
# Items kept over all the header's small arrays: past this, they are counted like big ones. Real headers keep a
# few hundred (per-layer head counts); 200,000 keys of 256 items each would be 51 million Python objects.
KEEP_TOTAL_ITEMS = 65_536
# Strings over all the header's arrays: the largest vocabulary with its merges has under a million; skipping one
# still costs a step in Python (4 million: about 1 s).
MAX_ARRAY_STRINGS = 4_000_000

_SCALARS = {  # GGUF value type -> struct format
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}
_STRING, _ARRAY = 8, 9
_CODES = {vtype: fmt[1] for vtype, fmt in _SCALARS.items()}
_MARKER_BYTES = frozenset(m.encode("utf-8") for m in MARKERS)
_MARKER_BYTES_LONGEST = max(map(len, _MARKER_BYTES))
_MARKER_FIRST = frozenset(m[0] for m in _MARKER_BYTES)  # "<" and "[": most strings are skipped at their first byte



class _Truncated(Exception):
    pass


@dataclass
class TensorInfo:
    name: str
    shape: list[int]
    type: str  # ggml type name, e.g. Q4_K
    n_elements: int
    n_bytes: int
    offset: int = 0  # where its data starts, from the start of the data section (GGUFInfo.data_start)


@dataclass
class GGUFInfo:
    """Everything `hearth models inspect` shows; sizes in bytes, counts as plain ints."""

    path: str
    file_size: int
    version: int
    name: str | None = None
    architecture: str | None = None
    parameters: int = 0
    file_type: str | None = None  # general.file_type as a name (Q4_K_M), else the most common weight type
    layers: int | None = None
    heads: int | None = None
    kv_heads: int | None = None  # the largest per-layer value when the file lists one per layer
    kv_heads_per_layer: list[int] | None = None
    embedding_size: int | None = None
    head_size_k: int | None = None
    head_size_v: int | None = None
    feed_forward_size: int | None = None
    context_length: int | None = None
    vocab_size: int | None = None
    tokenizer: str | None = None
    chat_template: str | None = None
    vocab_markers: list[str] = field(default_factory=list)  # the chat turn markers its vocabulary holds
    license: str | None = None
    sliding_window: int | None = None
    split_count: int = 1
    weights_bytes: int = 0
    header_bytes: int = 0
    data_start: int = 0  # the file offset of the tensor data section (the header, padded to the alignment)
    quant_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> {type: tensors}
    metadata: dict[str, Any] = field(default_factory=dict)  # small values; big arrays as "<array of N type>"
    tensors: list[TensorInfo] = field(default_factory=list)

    @property
    def seed_name(self) -> str | None:
        return SEED_NAMES.get(self.file_type or "")

    def kv_heads_total(self) -> int:
        """Sum over layers of the KV head count (what the KV cache is made of)."""
        if self.kv_heads_per_layer:
            return sum(self.kv_heads_per_layer)
        return (self.kv_heads or self.heads or 0) * (self.layers or 0)

    def to_dict(self, tensors: bool = False) -> dict[str, Any]:
        data = asdict(self)
        data["seed_name"] = self.seed_name
        if not tensors:
            data.pop("tensors")
        return data


class _Reader:
    """Bounded reads from a buffered file; every length is validated before use."""

    def __init__(self, fh: BinaryIO, size: int, name: str):
        self.fh, self.size, self.name = fh, size, name
        self.pos = 0
        self.kept_items = 0  # small arrays' items kept so far (KEEP_TOTAL_ITEMS)
        self.strings = 0  # strings in arrays so far (MAX_ARRAY_STRINGS)
        self.chunk = _SKIP_FIRST

    def read(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise _Truncated()
        if self.pos + n > MAX_HEADER_BYTES:
            raise ModelFileError(f"{self.name} has a GGUF header larger than {MAX_HEADER_BYTES // 2**20} MB, "
                                 "which no real model has; the file is corrupt.")
        data = self.fh.read(n)
        if len(data) != n:
            raise _Truncated()
        self.pos += n
        return data

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise _Truncated()
        if self.pos + n > MAX_HEADER_BYTES:
            self.read(n)  # raises the header-size error
        self.fh.seek(n, io.SEEK_CUR)
        self.pos += n

    def u32(self) -> int:
        return struct.unpack("<I", self.read(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.read(8))[0]

    def count(self, n: int, min_item: int, what: str, cap: int) -> int:
        if n * min_item > self.size - self.pos:
            raise ModelFileError(f"{self.name} claims {n:,} {what}, more than the rest of the file "
                                 "can hold; the file is truncated or its GGUF header is corrupt.")
        if n > cap:
            raise ModelFileError(f"{self.name} claims {n:,} {what}, far more than any model has (at most "
                                 f"{cap:,}); its GGUF header is corrupt or crafted.")
        return n

    def string(self) -> str:
        n = self.count(self.u64(), 1, "bytes in one string", MAX_STRING_BYTES)
        return self.read(n).decode("utf-8", "replace")

    def skip_strings(self, n: int, found: set[str] | None = None) -> None:
        """Skip n strings, walked in memory a chunk at a time, with read()'s and string()'s checks.

        A vocabulary and its merges are ~100k strings: one read and one seek each took ~60 ms for the
        bundled model, and the engine reads the header before every load (its fit check).
        found: where given, the chat turn markers (app/core/gguf/chat_formats.py) among the strings are added to it.
        """
        self.count_strings(n)
        self.chunk = _SKIP_FIRST
        unpack_from, buf, off, base = _U64.unpack_from, b"", 0, self.pos  # base: the file offset of buf[0]
        longest = _MARKER_BYTES_LONGEST if found is not None else -1
        for _ in range(n):
            if off + 8 > len(buf):
                buf, base, off = self._refill(buf, base, off, 8)
            (length,) = unpack_from(buf, off)
            off += 8
            if length > MAX_STRING_BYTES or off + length > len(buf):  # rare: check and read further
                self.pos = base + off
                buf, base, off = self._refill(buf, base, off,
                                              self.count(length, 1, "bytes in one string", MAX_STRING_BYTES))
            # An empty token has no first byte to look at: at a chunk's end buf[off] is past the buffer.
            if 0 < length <= longest and buf[off] in _MARKER_FIRST and buf[off:off + length] in _MARKER_BYTES:
                found.add(buf[off:off + length].decode("utf-8"))
            off += length
        self.pos = base + off
        if self.pos > MAX_HEADER_BYTES:
            self._refill(b"", self.pos, 0, 0)  # raises the header-size error
        self.fh.seek(self.pos)

    def count_strings(self, n: int) -> None:
        """Each string of an array costs a step even when skipped: their number over the header is capped."""
        self.strings += n
        if self.strings > MAX_ARRAY_STRINGS:
            raise ModelFileError(f"{self.name} has more than {MAX_ARRAY_STRINGS:,} strings in its metadata arrays, "
                                 "far more than any vocabulary; its GGUF header is corrupt or crafted.")

    def _refill(self, buf: bytes, base: int, off: int, need: int) -> tuple[bytes, int, int]:
        """skip_strings' buffer (bytes, file offset of its start, offset in it) with `need` bytes at the offset."""
        if base + off + need > MAX_HEADER_BYTES:
            self.pos = base + off
            self.read(max(need, 1))  # raises the header-size error, as a plain read here would
        buf, base, off = buf[off:], base + off, 0
        while len(buf) < need:
            more = self.fh.read(max(self.chunk, need))
            self.chunk = min(2 * self.chunk, _SKIP_CHUNK)
            if not more:
                raise _Truncated()
            buf += more
        return buf, base, off

    def value(self, vtype: int, found: set[str] | None = None) -> Any:
        if vtype in _SCALARS:
            fmt = _SCALARS[vtype]
            return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.u32()
            if etype not in _SCALARS and etype != _STRING:
                raise ModelFileError(f"{self.name} has an array of unknown GGUF type {etype}; "
                                     "the header is corrupt.")
            width = struct.calcsize(_SCALARS[etype]) if etype in _SCALARS else 8
            n = self.count(self.u64(), width, "array items", self.size)
            if n > KEEP_ARRAY_ITEMS or self.kept_items + n > KEEP_TOTAL_ITEMS:
                if etype == _STRING:
                    self.skip_strings(n, found)
                else:
                    self.skip(n * width)
                return _BigArray(n, _type_name(etype))
            self.kept_items += n
            if etype != _STRING:  # one unpack for the whole array, not a read per item
                return list(struct.unpack(f"<{n}{_CODES[etype]}", self.read(n * width)))
            self.count_strings(n)
            items = [self.string() for _ in range(n)]
            if found is not None:
                found.update(item for item in items if item in MARKERS)
            return items
        raise ModelFileError(f"{self.name} has a metadata value of unknown GGUF type {vtype}; "
                             "the header is corrupt.")


@dataclass
class _BigArray:
    length: int
    item_type: str

    def __repr__(self) -> str:
        return f"<array of {self.length} {self.item_type}>"


def _type_name(vtype: int) -> str:
    try:
        return gguf.GGUFValueType(vtype).name.lower()
    except ValueError:
        return str(vtype)


def _ggml_type(code: int, name: str) -> tuple[str, int, int]:
    try:
        qtype = gguf.GGMLQuantizationType(code)
    except ValueError:
        raise ModelFileError(f"{name} uses tensor type {code}, which this version of Hearth does not know.") from None
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    return qtype.name, block, type_size


def _file_type_name(code: Any) -> str | None:
    if not isinstance(code, int):
        return None
    try:
        return gguf.LlamaFileType(code).name.replace("MOSTLY_", "").replace("ALL_", "")
    except ValueError:
        return None


_LAYER = re.compile(r"^blk\.\d+\.")


def tensor_kind(name: str) -> str:
    """blk.12.attn_q.weight -> attn_q; token_embd.weight -> token_embd."""
    base = _LAYER.sub("", name)
    return base.rsplit(".", 1)[0] if base.endswith((".weight", ".bias")) else base


def read_gguf_info(path: str | Path) -> GGUFInfo:
    """Parse the header of a GGUF file; raises ModelFileError for anything that is not a sound GGUF."""
    p = Path(path).expanduser()
    name = p.name
    try:
        size = p.stat().st_size
        if p.is_dir():
            raise ModelFileError(f"{p} is a folder, not a GGUF model file.")
        fh = open_model_file(p)  # a regular file only: a FIFO would block the open (app/core/gguf/modelfile.py)
    except FileNotFoundError:
        raise ModelFileError(f"Model file not found: {p}") from None
    except OSError as exc:
        raise ModelFileError(f"Cannot read {p}: {exc.strerror or exc}.") from None
    with fh:
        reader = _Reader(io.BufferedReader(fh, buffer_size=1 << 20), size, name)
        try:
            return _parse(reader, p)
        except _Truncated:
            if size == 0:
                raise ModelFileError(f"{name} is empty (0 bytes); the download or copy may have failed.") from None
            raise ModelFileError(f"{name} is truncated: it ends inside the GGUF header.") from None
        except (UnicodeDecodeError, struct.error, MemoryError, OverflowError):
            raise ModelFileError(f"{name} has a corrupt GGUF header.") from None


def _parse(r: _Reader, p: Path) -> GGUFInfo:
    magic = r.fh.read(4)
    r.pos = len(magic)
    if not GGUF_MAGIC.startswith(magic) or (magic != GGUF_MAGIC and r.size >= 4):
        raise ModelFileError(f"{r.name} is not a GGUF model file (it does not start with 'GGUF').")
    if magic != GGUF_MAGIC:
        raise _Truncated()
    version = r.u32()
    if version not in SUPPORTED_VERSIONS:
        raise ModelFileError(version_problem(r.name, version))
    n_tensors = r.u64()
    n_kv = r.u64()
    # Each entry takes bytes of the file: counts the rest of the file cannot hold are refused before any is read.
    r.count(n_kv, MIN_KV_BYTES, "metadata entries", MAX_KV)
    r.count(n_tensors, MIN_TENSOR_BYTES, "tensors", MAX_TENSORS)
    if n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_BYTES > r.size - r.pos:
        raise ModelFileError(f"{r.name} claims {n_kv:,} metadata entries and {n_tensors:,} tensors, more than the "
                             "rest of the file can hold; the file is truncated or its GGUF header is corrupt.")

    meta: dict[str, Any] = {}
    markers: set[str] = set()
    for _ in range(n_kv):
        key = r.string()
        if not key or key in meta:
            why = "an empty key" if not key else f"the key {key[:64]!r} twice"
            raise ModelFileError(f"{r.name} has {why} in its GGUF header, which llama.cpp refuses; the file is "
                                 "corrupt.")
        meta[key] = r.value(r.u32(), markers if key == "tokenizer.ggml.tokens" else None)

    alignment = meta.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ModelFileError(f"{r.name} declares an invalid tensor alignment ({alignment}).")

    tensors = _tensor_table(r, n_tensors, alignment)
    data_end = sum(-(-t.n_bytes // alignment) * alignment for t in tensors)
    _check_contents(r, meta, tensors, -(-r.pos // alignment) * alignment + data_end)

    info = GGUFInfo(path=str(p), file_size=r.size, version=version, header_bytes=r.pos,
                    data_start=-(-r.pos // alignment) * alignment)
    info.tensors = tensors
    info.parameters = sum(t.n_elements for t in tensors)
    info.weights_bytes = sum(t.n_bytes for t in tensors)
    _fill_from_metadata(info, meta)
    info.vocab_markers = sorted(markers)
    return info


def _tensor_table(r: _Reader, n_tensors: int, alignment: int) -> list[TensorInfo]:
    """The tensor entries, held to llama.cpp's rules, so that what is listed as a model is one it can open."""
    tensors: list[TensorInfo] = []
    names: set[str] = set()
    data_end = 0  # where the tensors so far end in the data section, each padded to the alignment
    for _ in range(n_tensors):
        tname = r.string()
        if len(tname.encode("utf-8")) > MAX_TENSOR_NAME or tname in names:
            why = (f"a tensor name longer than {MAX_TENSOR_NAME} bytes" if tname not in names
                   else f"two tensors named {tname[:64]!r}")
            raise ModelFileError(f"{r.name} has {why}, which llama.cpp refuses; the file is corrupt.")
        names.add(tname)
        n_dims = r.u32()
        if n_dims > MAX_DIMS:
            raise ModelFileError(f"{r.name} has a tensor with {n_dims} dimensions; the header is corrupt.")
        shape = list(struct.unpack(f"<{n_dims}Q", r.read(8 * n_dims)))
        type_name, block, type_size = _ggml_type(r.u32(), r.name)
        offset = r.u64()
        n_el = 1
        for d in shape:
            n_el *= d
        if n_el > 2**50:
            raise ModelFileError(f"{r.name} has a tensor of {n_el:,} elements; the header is corrupt.")
        if shape and shape[0] % block:
            raise ModelFileError(f"{r.name}: tensor {tname!r} has rows of {shape[0]} values, not a whole number "
                                 f"of {type_name} blocks; the header is corrupt.")
        if offset != data_end:
            raise ModelFileError(f"{r.name}: tensor {tname!r} starts at {offset:,} in the data section where "
                                 f"llama.cpp expects {data_end:,}; the header is corrupt.")
        tensors.append(TensorInfo(tname, shape, type_name, n_el, n_el // block * type_size, offset))
        data_end += -(-tensors[-1].n_bytes // alignment) * alignment
    return tensors


def _check_contents(r: "_Reader", meta: dict[str, Any], tensors: list[TensorInfo], needed: int) -> None:
    """A sound header can still describe a model that is not there: judge the file by its content.

    A copy cut short (a failed download) keeps its whole header; a file that is only a header has no
    tensors; a file without an architecture is not a model llama.cpp can load.
    """
    if not meta.get("general.architecture"):
        raise ModelFileError(f"{r.name} names no model architecture (general.architecture); it is not a model "
                             "file llama.cpp can load.")
    if not tensors and int(meta.get("split.count", 1) or 1) <= 1:
        raise ModelFileError(f"{r.name} has no tensors: it is a GGUF header without a model.")
    if needed > r.size:
        raise ModelFileError(f"{r.name} is truncated or damaged: its tensor data needs {needed:,} bytes, but the "
                             f"file has {r.size:,}. Download or copy it again.")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fill_from_metadata(info: GGUFInfo, meta: dict[str, Any]) -> None:
    arch = meta.get("general.architecture")
    info.architecture = arch if isinstance(arch, str) else None
    a = f"{info.architecture}." if info.architecture else "\0"

    def get(key: str) -> Any:
        return meta.get(a + key)

    info.name = meta.get("general.name") if isinstance(meta.get("general.name"), str) else None
    lic = meta.get("general.license")
    info.license = lic if isinstance(lic, str) else None
    info.layers = _int(get("block_count"))
    info.embedding_size = _int(get("embedding_length"))
    info.feed_forward_size = _int(get("feed_forward_length")) if not isinstance(get("feed_forward_length"), list) \
        else max(get("feed_forward_length"), default=None)
    info.context_length = _int(get("context_length"))
    info.sliding_window = _int(get("attention.sliding_window"))
    heads = get("attention.head_count")
    info.heads = max(heads, default=None) if isinstance(heads, list) else _int(heads)
    kv = get("attention.head_count_kv")
    if isinstance(kv, list) and all(isinstance(x, int) for x in kv):
        info.kv_heads_per_layer = list(kv)
        info.kv_heads = max(kv, default=None)
    else:
        info.kv_heads = _int(kv) if kv is not None else info.heads
    head = info.embedding_size // info.heads if info.embedding_size and info.heads else None
    info.head_size_k = _int(get("attention.key_length")) or head
    info.head_size_v = _int(get("attention.value_length")) or head
    info.split_count = _int(meta.get("split.count")) or 1

    tokens = meta.get("tokenizer.ggml.tokens")
    if isinstance(tokens, _BigArray):
        info.vocab_size = tokens.length
    elif isinstance(tokens, list):
        info.vocab_size = len(tokens)
    else:
        info.vocab_size = _int(get("vocab_size"))
    model = meta.get("tokenizer.ggml.model")
    info.tokenizer = model if isinstance(model, str) else None
    template = meta.get("tokenizer.chat_template")
    info.chat_template = template if isinstance(template, str) else None

    kinds: dict[str, Counter] = {}
    for t in info.tensors:
        kinds.setdefault(tensor_kind(t.name), Counter())[t.type] += 1
    info.quant_by_kind = {k: dict(v) for k, v in sorted(kinds.items())}
    info.file_type = _file_type_name(meta.get("general.file_type")) or _dominant_type(info.tensors)
    info.metadata = {k: (repr(v) if isinstance(v, _BigArray) else v) for k, v in meta.items()
                     if k != "tokenizer.chat_template"}


def weight_bytes_by_type(tensors: list[TensorInfo]) -> Counter:
    """Bytes of the 2-D weights per ggml type: what a file really holds, whatever its name says."""
    weights = Counter()
    for t in tensors:
        if len(t.shape) >= 2:
            weights[t.type] += t.n_bytes
    return weights


def _dominant_type(tensors: list[TensorInfo]) -> str | None:
    # Without general.file_type, name the file after the type holding most of the 2-D weights' bytes.
    weights = weight_bytes_by_type(tensors)
    return weights.most_common(1)[0][0] if weights else None
