"""Images and sounds in `hearth chat`: --image FILE and --audio FILE (repeatable) with --prompt, and /image PATH,
/audio PATH in the turn-by-turn chat, which attach to the next message.

A file is read (bounded) and checked from its header (app/protocol/media.py) when it is named, so a bad one is a
sentence before the model loads or before the message is sent; a model that cannot take it is said before the
question goes, with what to do.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.core.errors import HearthError
from app.protocol.media import REMOTE_TEXT_ONLY, media_part, read_medium, refusal


def add_media_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image", metavar="FILE", action="append", default=[],
                   help="an image for the model to see (PNG, JPEG, GIF, BMP, WebP; repeatable); needs a model with "
                   "its projector (--mmproj, or an mmproj file beside the model)")
    p.add_argument("--audio", metavar="FILE", action="append", default=[],
                   help="a sound for the model to hear (WAV, MP3, FLAC; repeatable); needs a model that hears")


def read_part(kind: str, path: str, how: str = "--") -> dict:
    """The seam's part for a file, read and checked; HearthError in one sentence. how: "--" for a flag, "/" for
    the chat's command, as the sentence names it."""
    where = Path(path).expanduser()
    if not where.is_file():
        raise HearthError(f"{how}{kind} {path}: no such file.")
    return media_part(kind, read_medium(kind, where).data, where.name)


def parts_from_args(args: argparse.Namespace) -> list[dict]:
    return [read_part("image", p) for p in args.image or ()] + [read_part("audio", p) for p in args.audio or ()]


def refuse_unless_supported(args: argparse.Namespace) -> None:
    """Media go alone: the documents and tools paths read text messages (a server's model is sent them as
    OpenAI's image_url and input_audio parts, app/backends/remote.py)."""
    if not (args.image or args.audio):
        return
    if getattr(args, "docs", None) or getattr(args, "tools", None):
        raise HearthError("--image and --audio cannot yet go with documents or tools in one chat; ask about the "
                          "image in a chat of its own.")


def check_model_takes(info: dict, parts: list[dict]) -> None:
    """A sentence, before the question goes, when the loaded model cannot see or hear what is attached."""
    if info.get("remote") and info.get("media") is None:
        return  # a server that does not say what its model takes answers for itself
    for kind in ("image", "audio"):
        if any(p.get("type") == kind for p in parts):
            why = refusal(info.get("model") or "This model", info.get("media") or {}, kind,
                          **({"no_projector": REMOTE_TEXT_ONLY} if info.get("remote") else {}))
            if why:
                raise HearthError(why)


def content(text: str, parts: list[dict]) -> str | list[dict]:
    """A message's content: the text alone, or the media first and then the text (as most models were trained)."""
    return [*parts, {"type": "text", "text": text}] if parts else text


def attach_command(line: str) -> tuple[str, str] | None:
    """("image" | "audio", path) for a line '/image PATH' or '/audio PATH'; None for any other line."""
    for kind in ("image", "audio"):
        command = f"/{kind}"
        if line == command or line.startswith(command + " "):
            return kind, line[len(command):].strip()
    return None


def described(part: dict) -> str:
    return part.get("name") or part.get("type", "")
