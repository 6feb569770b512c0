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
import os
import typing
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from json.encoder import encode_basestring as _encode_str
from typing import Any

from app.core.errors import (ContextTooLong, EngineBusy, EngineCrashed, GenerationError, HearthError,
                             InvalidRequest, ModelFileError, ModelLoadError, ModelTooBig)
from app.protocol.option_spec import fits, internal, option

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
# The native libraries an engine process starts with (app/core/making/runtimes.py; chosen by app/backends/runtime_choice.py).
RUNTIMES = ("auto", "cpu", "vulkan", "cuda")
LOGICAL_CORES = os.cpu_count() or 1


class _Options:
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, problems: list[str] | None = None):
        """The options in `data`; a value of the wrong type (a hand-edited settings file, an old client) is
        left out, so that field keeps its default, and named in `problems` when given."""
        declared = typing.get_type_hints(cls)
        kept = {}
        for key, value in (data or {}).items() if isinstance(data, dict) else ():
            if key not in declared or key.startswith("_"):
                continue
            if fits(declared[key], value, deep=False):
                kept[key] = value
            elif problems is not None:
                problems.append(f"{key} = {json.dumps(value)[:40]} (not a {_type_name(declared[key])})")
        return cls(**kept)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _type_name(kind: Any) -> str:
    return str(kind).replace("typing.", "").replace("<class '", "").replace("'>", "")


# Each option is declared once, here: its type and default, and (option_spec.option) its flag, help, the window's
# spin box and the range the engine accepts, or (internal) why no user sets it. The command line, the window's
# panels and the engine's range check are built from these declarations (app/protocol/option_fields.py).
@dataclass
class LoadOptions(_Options):
    model_path: str = internal("", "the model itself: --model, or the file chosen in the window")
    n_threads: int | None = option(None, "--threads", "CPU threads (default: physical cores)", "N", dest="threads",
                                   low=1, high=LOGICAL_CORES)  # None: physical cores
    n_gpu_layers: int = option(0, "--gpu-layers", "layers to offload to the GPU (-1: all)", "N", dest="gpu_layers",
                               low=-1, high=100000)
    # The engine runtime: auto (a GPU runtime that sees a real GPU, else cpu) | cpu | vulkan | cuda.
    runtime: str = option("auto", "--runtime", "engine runtime (default auto: a GPU runtime that sees a real GPU, "
                          "else cpu; hearth runtimes list shows them)", choices=RUNTIMES)
    n_ctx: int = option(4096, "--ctx", "context size in tokens (default 4096)", "N", dest="ctx", low=64, high=1 << 24)
    n_batch: int = option(512, "--batch", "prompt batch size (default 512)", "N", dest="batch", low=1, high=1 << 16)
    use_mmap: bool = option(True, "--no-mmap", "read the whole model into memory instead of mapping it", negate=True)
    use_mlock: bool = option(False, "--mlock", "lock the model in RAM")
    kv_type: str = option("f16", "--kv-type", "KV cache type (default f16)", choices=KV_TYPES)
    flash_attn: str = option("auto", "--flash-attn", "flash attention (default auto)", choices=FLASH_ATTN)
    # Speculative decoding (draft model or prompt lookup).
    draft_model: str | None = option(None, "--draft-model",
                                     "small GGUF with the same vocabulary for speculative decoding", "PATH")
    lookup: bool = option(False, "--lookup", "speculative decoding with n-gram drafts from the context")
    draft_max: int | None = option(None, "--draft-max", "longest draft (default: adaptive)", "N", low=0, high=64)
    # What happens when the context is full.
    context_policy: str = option("window", "--context-policy",
                                 "what happens when the context is full (default: window)", choices=CONTEXT_POLICIES)
    sink_tokens: int = option(4, "--sink-tokens", "attention-sink tokens kept (default 4)", "N", low=0, high=4096)
    keep_system: bool = option(True, "--no-keep-system", "let the window slide over the system prompt too",
                               negate=True)
    window_fraction: float = option(0.5, "--window-fraction", "share of the movable context dropped each time the "
                                    "window slides (default 0.5)", "F", low=0.01, high=0.99)
    # The h2o policy's budgets, as shares of the context kept at an eviction (app/engine/context/h2o.py).
    h2o_heavy: float = option(0.25, "--h2o-heavy", "h2o policy (experimental): share of the context kept for the "
                              "most-attended tokens at an eviction (default 0.25)", "F", low=0.0, high=0.9)
    h2o_recent: float = option(0.25, "--h2o-recent", "h2o policy (experimental): share of the context kept as the "
                               "most recent tokens (default 0.25)", "F", low=0.0, high=0.9)
    # The chat template: auto (the model's own, else one chosen by its vocabulary, app/core/gguf/chat_formats.py),
    # a llama.cpp built-in name, "plain", or the path of a Jinja file.
    chat_template: str = option("auto", "--chat-template", "chat template: auto (default: the model's own, else "
                                "chosen by its vocabulary), a llama.cpp built-in name (chatml, gemma, llama3, phi3, "
                                "mistral-v7, ...), plain, or a Jinja file", "NAME|FILE")
    # Load even when the memory-fit estimate says the model does not fit (app/engine/process/preflight.py).
    ignore_fit: bool = option(False, "--ignore-fit", "load even when the memory estimate says the model does not fit "
                              "(may be very slow)", remembered=False)
    # The watchdog's least budget for one engine step (a token or a prompt batch), in seconds; None: its default
    # (app/backends/supervisor.py: at least STEP_FLOOR_S, and STEP_FACTOR times the step time measured at load).
    step_timeout_s: float | None = option(None, "--step-timeout", "end and restart the engine when one step (a token "
                                          "or a prompt batch) takes longer than this; the request is told why "
                                          "(default: 50 times the step's time measured at load, at least 10 s)",
                                          "SECONDS", dest="step_timeout", low=0.1, high=86400.0)
    # The projector (mmproj-*.gguf) that lets the model see images and hear sounds (app/engine/media/projector.py);
    # None: the one paired with the model in the library, if any; "none": no projector.
    mmproj: str | None = option(None, "--mmproj", "the model's projector for images and audio (mmproj-*.gguf; "
                                "default: the one beside the model in the library; none: no projector)", "PATH",
                                remembered=False)
    # Requests served at once, each in its own KV sequence (the API server's slots).
    n_parallel: int = internal(1, "a server's choice: hearth serve --parallel N (the window and hearth chat answer "
                               "one at a time)", valid=(1, 64))
    # None: decided by the per-machine probe (see engine/probes/probe.py).
    extra_bufts: bool | None = internal(None, "decided per machine by the extra-buffer-types probe "
                                        "(app/engine/probes/probe.py)")


@dataclass
class SamplingOptions(_Options):
    temperature: float = option(0.7, "--temp", "temperature (0: greedy)", "T", dest="temp", label="Temperature",
                                tip="0 = always the most likely token (greedy)", low=0.0, high=2.0, step=0.05)
    top_k: int = option(40, "--top-k", "", "K", label="Top-K", tip="keep only the K most likely tokens (0 = off)",
                        low=0, high=1000, valid=(0, 1 << 20))
    top_p: float = option(0.95, "--top-p", "", "P", label="Top-P",
                          tip="keep the most likely tokens up to this total probability", low=0.0, high=1.0,
                          step=0.01)
    min_p: float = option(0.05, "--min-p", "", "P", label="Min-P",
                          tip="drop tokens less likely than this share of the best one", low=0.0, high=1.0, step=0.01)
    # llama.cpp's default; every surface (CLI, window, API, remote) starts here.
    repeat_penalty: float = option(1.0, "--repeat-penalty", "", "R", label="Repeat penalty",
                                   tip="discourage repeating recent tokens", low=0.5, high=2.0, step=0.01,
                                   valid=(0.0, 10.0))
    repeat_last_n: int = option(64, "--repeat-last-n", "recent tokens the repeat penalty looks at (default 64)", "N",
                                low=-1, high=1 << 20)
    max_tokens: int = option(512, "--max-tokens", "", "N", label="Max tokens", tip="longest answer in tokens",
                             low=1, high=32768, valid=(1, 1 << 24))
    seed: int = option(-1, "--seed", "random seed (-1: random)", "S", label="Seed",  # -1: fresh per request
                       tip="-1 = a new random seed per answer", low=-1, high=2**31 - 1)
    stop: list[str] = option(flag="--stop", help="stop string (repeatable)", metavar="TEXT", repeat=True,
                             default_factory=list)
    ignore_eos: bool = internal(False, "for benchmarks, which must always generate max_tokens")
    # OpenAI's penalties (the API server's): by how often / whether a token already occurred.
    frequency_penalty: float = internal(0.0, "an OpenAI request parameter, set per request by API clients "
                                        "(app/server)", valid=(-2.0, 2.0))
    presence_penalty: float = internal(0.0, "an OpenAI request parameter, set per request by API clients "
                                       "(app/server)", valid=(-2.0, 2.0))
    logit_bias: dict[int, float] = internal(why="an OpenAI request parameter (token ids), set per request by API "
                                            "clients (app/server)", default_factory=dict)  # token id -> added
    # A llama.cpp GBNF grammar the answer must follow (structured output, tool calls); "" for none.
    grammar: str = internal("", "built per request by the API server from response_format or tools (app/server)")
    # Text the answer is expected to mostly repeat (OpenAI's predicted outputs): drafts for speculative
    # decoding (app/engine/speculation/prediction.py); "" for none. It changes the speed, never the answer.
    prediction: str = internal("", "a request's own text (API 'prediction', hearth chat --predict, the window's "
                               "regenerate)")
    # The settings the user gave (field names). The others take the model's own recommendation where its file
    # has one (GGUF general.sampling.*, app/core/gguf/sampling.py), else the defaults above. None: every field
    # is the caller's as it stands (benchmarks, probes, anything that must not change with the model).
    given: list[str] | None = internal(None, "which settings the user gave, filled in by each surface (flags given, "
                                       "fields sent, boxes changed)")

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
