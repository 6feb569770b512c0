"""What GGUF file names say: the parts of a split set, and the quantization type people write into names.

Split sets are llama.cpp's gguf-split naming, `name-00001-of-00003.gguf`; the library groups local parts
with it, the hub groups a repository's files with it, and the type guess ignores it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

_SPLIT_SUFFIX = r"-(?P<index>\d{5})-of-(?P<count>\d{5})"
_SPLIT = re.compile(r"^(?P<base>.*)" + _SPLIT_SUFFIX + r"\.gguf$", re.I)
_QUANT = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|FP16|F32|FP32)(?=[.\-_]|$)")
_QUANT_SUFFIX = re.compile(r"[-._](I?Q\d(_[A-Z0-9]+)*|BF16|F16|F32)$", re.I)


@dataclass(frozen=True)
class SplitPart:
    base: str  # the name without the part suffix (with any folders the name had)
    index: int  # 1-based
    count: int


def split_part(name: str) -> SplitPart | None:
    """'dir/model-00002-of-00003.gguf' -> SplitPart('dir/model', 2, 3); None for a file that is not a part."""
    m = _SPLIT.match(name)
    return SplitPart(m["base"], int(m["index"]), int(m["count"])) if m else None


def quant_from_filename(filename: str) -> str | None:
    """Guess the quantization type from a file name (qwen2.5-7b-instruct-q4_k_m.gguf -> Q4_K_M)."""
    stem = re.sub(_SPLIT_SUFFIX, "", PurePath(filename).name, flags=re.I)
    match = _QUANT.search(stem.upper().rsplit(".GGUF", 1)[0] + ".")
    if not match:
        return None
    found = match.group(1)
    return {"FP16": "F16", "FP32": "F32"}.get(found, found)


def strip_quant(stem: str) -> str:
    """'model-Q4_1' -> 'model': the name to give a requantized copy its own type."""
    return _QUANT_SUFFIX.sub("", stem)
