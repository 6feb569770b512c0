"""The typed protocol between the engine client and the engine host.

Commands go to the host, events come back, one JSON object per line over the
child's stdin/stdout. Option dataclasses travel as plain dicts.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring as _encode_str
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Commands (client -> host)
LOAD = "load"
CHAT = "chat"
COMPLETE = "complete"
CANCEL = "cancel"
RESET = "reset"
UNLOAD = "unload"
SHUTDOWN = "shutdown"

# Events (host -> client)
LOADED = "loaded"
TOKEN = "token"
STATS = "stats"
DONE = "done"
ERROR = "error"
READY = "ready"  # host process is up and reading commands
PROGRESS = "progress"  # model loading, {fraction}
OK = "ok"  # a command without a result finished (reset, unload)

KV_TYPES = ("f16", "q8_0", "q4_0")
FLASH_ATTN = ("auto", "on", "off")
CONTEXT_POLICIES = ("window", "truncate-middle", "stop")


class _Options:
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None):
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadOptions(_Options):
    model_path: str = ""
    n_ctx: int = 4096
    n_batch: int = 512
    n_threads: int | None = None  # None: physical cores
    n_gpu_layers: int = 0
    use_mmap: bool = True
    use_mlock: bool = False
    kv_type: str = "f16"
    flash_attn: str = "auto"
    # None: decided by the per-machine probe (see engine/probe.py).
    extra_bufts: bool | None = None
    # Speculative decoding (draft model or prompt lookup).
    draft_model: str | None = None
    lookup: bool = False
    draft_max: int | None = None  # None: adaptive
    # What happens when the context is full.
    context_policy: str = "window"
    sink_tokens: int = 4
    keep_system: bool = True
    window_fraction: float = 0.5  # of the movable part dropped each time the window slides
    # Load even when the memory-fit estimate says the model does not fit (app/engine/preflight.py).
    ignore_fit: bool = False


@dataclass
class SamplingOptions(_Options):
    max_tokens: int = 512
    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64
    seed: int = -1  # -1: a fresh random seed per request
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False  # benchmarks: always generate max_tokens

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def encode(message: dict[str, Any]) -> bytes:
    if len(message) == 2 and message.get("ev") == TOKEN:
        # The per-token event: the C string encoder alone is several times faster than json.dumps.
        return b'{"ev":"token","text":' + _encode_str(message["text"]).encode("utf-8") + b"}\n"
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, Any]:
    return json.loads(line.decode("utf-8"))
