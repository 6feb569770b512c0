"""The commands on the engine pipe (client -> host), typed beside the events (app/protocol/messages.py).

Each command is one frozen dataclass: the supervisor builds it, `wire()` is the JSON object it writes on the
child's stdin, and the host reads a line back into the same class with `read()`, which checks every field's
type. A line that is not a command of this protocol is a ProtocolError whose sentence names the field, answered
by the host as a PROTOCOL error event; before, the host read fields with dict.get() wherever it needed them, and
a malformed one surfaced as an engine bug deep in a session.

Options travel as their dataclasses' plain dicts; a value of the wrong type in them keeps its default
(LoadOptions.from_dict), as a hand-edited settings file does, and their ranges are checked where they are used
(app/protocol/option_fields.check_options).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Annotated, Any, ClassVar

from app.core.errors import HearthError
from app.protocol import messages as P
from app.protocol.option_spec import Range, fits, hints, required


class ProtocolError(HearthError):
    """A line on the pipe that is not a command of this protocol: a client bug, said in one sentence."""


@dataclass(frozen=True, kw_only=True)
class Command:
    CMD: ClassVar[str] = ""
    # Set by the supervisor as it sends the command; every event the host sends for it carries the same id.
    id: int | None = None

    def with_id(self, request_id: int) -> "Command":
        return replace(self, id=request_id)

    def wire(self) -> dict[str, Any]:
        """The JSON object on the pipe: {"cmd": ..., "id": ..., its fields}; options as plain dicts."""
        out: dict[str, Any] = {"cmd": self.CMD}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in ("id", "tools"):
                continue
            out[f.name] = value.to_dict() if isinstance(value, P._Options) else value
        return out


@dataclass(frozen=True, kw_only=True)
class Load(Command):
    CMD: ClassVar[str] = P.LOAD
    options: P.LoadOptions


@dataclass(frozen=True, kw_only=True)
class _Answer(Command):
    sampling: P.SamplingOptions = field(default_factory=P.SamplingOptions)
    # A client that draws (the window) asks for tokens merged into one event per this many ms; 0: each token.
    stream_interval_ms: Annotated[float, Range(0, math.inf)] = 0.0
    # False: a prompt longer than the context fails (ContextTooLong) instead of being cut by the context policy.
    truncate: bool = True


@dataclass(frozen=True, kw_only=True)
class Chat(_Answer):
    CMD: ClassVar[str] = P.CHAT
    messages: list[dict]
    tools: list[dict] | None = None  # OpenAI's function descriptions, rendered into the prompt


@dataclass(frozen=True, kw_only=True)
class Complete(_Answer):
    CMD: ClassVar[str] = P.COMPLETE
    prompt: str


@dataclass(frozen=True, kw_only=True)
class Embed(Command):
    CMD: ClassVar[str] = P.EMBED
    inputs: list  # texts, or token lists


@dataclass(frozen=True, kw_only=True)
class Cancel(Command):
    CMD: ClassVar[str] = P.CANCEL
    target: int | None = None  # the request to stop; None: every one


@dataclass(frozen=True, kw_only=True)
class Reset(Command):
    CMD: ClassVar[str] = P.RESET


@dataclass(frozen=True, kw_only=True)
class Unload(Command):
    CMD: ClassVar[str] = P.UNLOAD


@dataclass(frozen=True, kw_only=True)
class Shutdown(Command):
    CMD: ClassVar[str] = P.SHUTDOWN


COMMANDS: dict[str, type[Command]] = {cls.CMD: cls for cls in
                                      (Load, Chat, Complete, Embed, Cancel, Reset, Unload, Shutdown)}
ANSWERS = (Chat, Complete)  # the commands that generate, in parallel slots


def read(data: Any) -> Command:
    """The command a decoded line carries, each field checked against its declaration; ProtocolError names what
    is wrong with it."""
    if not isinstance(data, dict):
        raise ProtocolError("The engine received a command that is not a JSON object.")
    name = data.get("cmd")
    cls = COMMANDS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ProtocolError(f"The engine does not know the command {str(name)[:40]!r}.")
    kept: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            if required(f):
                raise ProtocolError(f"The '{name}' command came without its '{f.name}'.")
            continue
        value = data[f.name]
        kind = hints(cls)[f.name]
        if isinstance(kind, type) and issubclass(kind, P._Options):
            ok = isinstance(value, dict)  # its fields keep their defaults where they do not fit (from_dict)
            value = kind.from_dict(value) if ok else value
        else:
            ok = fits(kind, value)
        if not ok:
            raise ProtocolError(f"The engine cannot read the '{f.name}' of the '{name}' command.")
        kept[f.name] = value
    return cls(**kept)
