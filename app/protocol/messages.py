"""The typed protocol between every engine client and the engine host.

Commands go to the host, events come back, one JSON object per line over the
child's stdin/stdout. Option dataclasses travel as plain dicts.

Every command carries a request id ("id") and every event the host sends for
it carries the same id, so several clients (the window, the CLI, the API
server) can share one engine and a late event of a finished or cancelled
request is recognised as such. On the client side events are typed: each kind
is a subclass of dict (the wire object, so figures stay addressable by key and
the CLI's JSON output is the event itself) with the accessors that kind has.
Error kinds are an enum, never compared as free strings.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from json.encoder import encode_basestring as _encode_str
from typing import Any

from app.core.errors import (ContextTooLong, EngineBusy, EngineCrashed, GenerationError, HearthError,
                             InvalidRequest, ModelFileError, ModelLoadError, ModelTooBig)

# Commands (client -> host)
LOAD = "load"
CHAT = "chat"
COMPLETE = "complete"
EMBED = "embed"
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
EXITED = "exited"  # client side only: the process ended because it was asked to

KV_TYPES = ("f16", "q8_0", "q4_0")
FLASH_ATTN = ("auto", "on", "off")
CONTEXT_POLICIES = ("window", "truncate-middle", "stop", "h2o")  # h2o: experimental (app/engine/context/h2o.py)
# The native libraries an engine process starts with (app/core/runtimes.py; chosen by app/backends/runtime_choice.py).
RUNTIMES = ("auto", "cpu", "vulkan", "cuda")


def _accepts(annotation: str, value: Any) -> bool:
    """Whether a value read from JSON fits a field declared as `annotation` ("int | None", "list[str]", ...)."""
    if value is None:
        return "None" in annotation
    kinds = {part.strip().split("[")[0] for part in annotation.split("|")}
    if isinstance(value, bool):
        return "bool" in kinds
    if isinstance(value, int):
        return bool(kinds & {"int", "float"})
    if isinstance(value, float):
        return "float" in kinds
    return any(isinstance(value, {"str": str, "list": list, "dict": dict}.get(kind, ())) for kind in kinds)


class _Options:
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, problems: list[str] | None = None):
        """The options in `data`; a value of the wrong type (a hand-edited settings file, an old client) is
        left out, so that field keeps its default, and named in `problems` when given."""
        declared = {f.name: str(f.type) for f in fields(cls)}
        kept = {}
        for key, value in (data or {}).items() if isinstance(data, dict) else ():
            if key not in declared:
                continue
            if _accepts(declared[key], value):
                kept[key] = value
            elif problems is not None:
                problems.append(f"{key} = {json.dumps(value)[:40]} (not a {declared[key]})")
        return cls(**kept)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadOptions(_Options):
    model_path: str = ""
    n_ctx: int = 4096
    n_batch: int = 512
    n_threads: int | None = None  # None: physical cores
    n_gpu_layers: int = 0
    runtime: str = "auto"  # the engine runtime: auto (a GPU runtime that sees a real GPU, else cpu) | cpu | vulkan | cuda
    n_parallel: int = 1  # requests served at once, each in its own KV sequence (the API server's slots)
    use_mmap: bool = True
    use_mlock: bool = False
    kv_type: str = "f16"
    flash_attn: str = "auto"
    # None: decided by the per-machine probe (see engine/probes/probe.py).
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
    # The h2o policy's budgets, as shares of the context kept at an eviction (app/engine/context/h2o.py).
    h2o_heavy: float = 0.25
    h2o_recent: float = 0.25
    # The chat template: auto (the model's own, else one chosen by its vocabulary, app/core/chat_formats.py),
    # a llama.cpp built-in name, "plain", or the path of a Jinja file.
    chat_template: str = "auto"
    # Load even when the memory-fit estimate says the model does not fit (app/engine/process/preflight.py).
    ignore_fit: bool = False
    # The watchdog's least budget for one engine step (a token or a prompt batch), in seconds; None: its default
    # (app/backends/supervisor.py: at least STEP_FLOOR_S, and STEP_FACTOR times the step time measured at load).
    step_timeout_s: float | None = None


@dataclass
class SamplingOptions(_Options):
    max_tokens: int = 512
    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0  # llama.cpp's default; every surface (CLI, window, API, remote) starts here
    repeat_last_n: int = 64
    seed: int = -1  # -1: a fresh random seed per request
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False  # benchmarks: always generate max_tokens
    # OpenAI's penalties (the API server's): by how often / whether a token already occurred.
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit
    # A llama.cpp GBNF grammar the answer must follow (structured output, tool calls); "" for none.
    grammar: str = ""
    # Text the answer is expected to mostly repeat (OpenAI's predicted outputs): drafts for speculative
    # decoding (app/engine/speculation/prediction.py); "" for none. It changes the speed, never the answer.
    prediction: str = ""
    # The settings the user gave (field names). The others take the model's own recommendation where its file
    # has one (GGUF general.sampling.*, app/core/model_sampling.py), else the defaults above. None: every field
    # is the caller's as it stands (benchmarks, probes, anything that must not change with the model).
    given: list[str] | None = None

    def __post_init__(self):
        # Over JSON the token ids arrive as strings.
        if self.logit_bias:
            self.logit_bias = {int(k): float(v) for k, v in self.logit_bias.items()}

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalized(self) -> bool:
        return self.repeat_penalty != 1.0 or bool(self.frequency_penalty) or bool(self.presence_penalty)


class ErrorKind(str, Enum):
    """Why a command failed; each kind maps to the HearthError subclass a blocking caller sees."""

    ENGINE_CRASHED = "EngineCrashed"
    MODEL_FILE = "ModelFileError"
    MODEL_LOAD = "ModelLoadError"
    MODEL_TOO_BIG = "ModelTooBig"
    GENERATION = "GenerationError"
    CONTEXT_LENGTH = "ContextTooLong"
    BUSY = "EngineBusy"
    INVALID_REQUEST = "InvalidRequest"
    OTHER = "HearthError"  # a HearthError without a kind of its own
    PROTOCOL = "protocol"  # a malformed command: a client bug
    INTERNAL = "internal"  # an engine bug; the traceback is in the engine log

    @classmethod
    def of(cls, exc: BaseException) -> "ErrorKind":
        for klass in type(exc).__mro__:
            kind = _KIND_OF_CLASS.get(klass)
            if kind is not None:
                return kind
        return cls.INTERNAL

    @classmethod
    def parse(cls, value: Any) -> "ErrorKind":
        try:
            return cls(value)
        except ValueError:
            return cls.INTERNAL

    def error(self, message: str) -> HearthError:
        """The exception a blocking caller raises for an error event of this kind."""
        return _CLASS_OF_KIND.get(self, HearthError)(message)


_CLASS_OF_KIND = {
    ErrorKind.ENGINE_CRASHED: EngineCrashed,
    ErrorKind.MODEL_FILE: ModelLoadError,  # a file the engine cannot load is a failed load to the caller
    ErrorKind.MODEL_LOAD: ModelLoadError,
    ErrorKind.MODEL_TOO_BIG: ModelTooBig,
    ErrorKind.GENERATION: GenerationError,
    ErrorKind.CONTEXT_LENGTH: ContextTooLong,
    ErrorKind.BUSY: EngineBusy,
    ErrorKind.INVALID_REQUEST: InvalidRequest,
}
_KIND_OF_CLASS = {
    EngineCrashed: ErrorKind.ENGINE_CRASHED, ModelFileError: ErrorKind.MODEL_FILE,
    ModelTooBig: ErrorKind.MODEL_TOO_BIG, ModelLoadError: ErrorKind.MODEL_LOAD,
    ContextTooLong: ErrorKind.CONTEXT_LENGTH, GenerationError: ErrorKind.GENERATION, EngineBusy: ErrorKind.BUSY,
    InvalidRequest: ErrorKind.INVALID_REQUEST, HearthError: ErrorKind.OTHER,
}


# --- events (client side) ---------------------------------------------------
class Event(dict):
    """One event from the engine, as its wire object; subclasses say which kind."""

    KIND = ""

    @property
    def request_id(self) -> int | None:
        return self.get("id")


class Ready(Event):
    KIND = READY


class Loaded(Event):
    """A model is loaded; the event is its description (app.engine.process.session.Session.describe)."""

    KIND = LOADED


class Progress(Event):
    KIND = PROGRESS

    @property
    def fraction(self) -> float:
        return float(self.get("fraction", 0.0))


class Token(Event):
    KIND = TOKEN

    @property
    def text(self) -> str:
        return self["text"]


class Stats(Event):
    """Live figures while an answer is generated (tokens/s, context fill, window, drafts)."""

    KIND = STATS


class Done(Event):
    """The answer is complete: its text, finish_reason and figures."""

    KIND = DONE


class Ok(Event):
    KIND = OK


class Exited(Event):
    KIND = EXITED


class Failed(Event):
    """A command failed, or the engine died (kind ENGINE_CRASHED, with its log)."""

    KIND = ERROR

    @property
    def kind(self) -> ErrorKind:
        return ErrorKind.parse(self.get("kind"))

    @property
    def message(self) -> str:
        return self.get("message") or "The engine reported an error."

    @property
    def kept(self) -> dict | None:
        """For a refused load: the model the engine still has loaded (refused before unloading)."""
        return self.get("kept")

    def error(self) -> HearthError:
        return self.kind.error(self.message)


EVENT_TYPES: dict[str, type[Event]] = {cls.KIND: cls for cls in
                                       (Ready, Loaded, Progress, Token, Stats, Done, Ok, Exited, Failed)}


def failed(kind: ErrorKind, message: str, request_id: int | None = None, **detail: Any) -> Failed:
    return Failed({"ev": ERROR, "id": request_id, "kind": kind.value, "message": message, **detail})


def encode(message: dict[str, Any]) -> bytes:
    if message.get("ev") == TOKEN and len(message) == 3:
        # The per-token event: the C string encoder alone is several times faster than json.dumps.
        return (b'{"ev":"token","id":%d,"text":' % message["id"]
                + _encode_str(message["text"]).encode("utf-8") + b"}\n")
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, Any]:
    return json.loads(line.decode("utf-8"))


def decode_event(line: bytes) -> Event | None:
    """The typed event a line of the host's output carries; None for a line that is not one."""
    data = decode(line)
    cls = EVENT_TYPES.get(data.get("ev")) if isinstance(data, dict) else None
    return cls(data) if cls is not None else None
