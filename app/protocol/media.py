"""Images and sounds in a chat message: their shape at the seam, and the bounds every one passes first.

The shape (every client builds it, the engine reads it). A message's `content` is either a string or a list of
parts, in the order the user put them:

    {"role": "user", "content": [
        {"type": "image", "data": "<base64 of the file's bytes>"},
        {"type": "text", "text": "What is in this picture?"},
        {"type": "audio", "data": "<base64 of a WAV, MP3 or FLAC file>", "name": "note.wav"}]}

`data` is the file as it is on disk (PNG, JPEG, GIF, BMP or WebP; WAV, MP3 or FLAC), never decoded pixels;
`name` is optional and only said back in sentences. The API dialects (image_url data URLs, Anthropic image
blocks, Responses input_image) and the window's attachments turn their own shapes into this one.

The bounds (`check_media`): a file is sniffed from its first bytes and its header is read, never decoded, so a
decompression bomb (a 20000x20000 PNG of a few hundred KB) is refused in microseconds, before anything
allocates its pixels: its kind must be the part's, its header whole, its pixels at most MAX_PIXELS, its sound at
most MAX_AUDIO_SECONDS. Each refusal is one sentence (InvalidRequest: an API client gets a 400).

The text the model reads (`flatten`): llama.cpp's rule (common/chat.cpp) — text parts joined by newlines, a media
part written as libmtmd's marker with no newline around it — so a template that knows only strings renders a
conversation with media, and the engine finds each medium where its marker stands.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from app.core.errors import InvalidRequest
from app.core.store.bounded_read import Budget, read_file

KINDS = ("image", "audio")
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WebP")
AUDIO_FORMATS = ("WAV", "MP3", "FLAC")
MAX_FILE_BYTES = 25 * 2**20  # one image or sound file as sent
# What libmtmd's decoder (stb_image) allocates is width x height x 3 bytes and more: 40 MP is 120 MB of RGB.
# A camera's 12-50 MP photo passes; a 20000x20000 bomb (400 MP, 1.2 GB decoded) does not.
MAX_PIXELS = 40_000_000
MAX_AUDIO_SECONDS = 300.0  # Qwen2-Audio reads 30 s in 750 tokens: 5 minutes is 7,500 tokens
MAX_PARTS = 32  # media parts in one request


class MediaError(InvalidRequest):
    """A media part that cannot be used: not the kind it says, damaged, too big or too long."""


@dataclass(frozen=True)
class Media:
    """One checked medium of a message: its bytes, what they are, and their hash (the prompt cache's key)."""
    kind: str  # "image" | "audio"
    format: str  # "PNG", "WAV", ...
    data: bytes
    width: int = 0
    height: int = 0
    seconds: float = 0.0
    name: str = ""

    @cached_property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def describe(self) -> str:
        label = f"'{self.name}'" if self.name else f"the {self.format} {self.kind}"
        if self.kind == "image":
            return f"{label} ({self.width}x{self.height})"
        return f"{label} ({self.seconds:.1f} s)"


def media_part(kind: str, data: bytes, name: str = "") -> dict:
    """The seam's part for a file's bytes (what the CLI and the window send)."""
    part = {"type": kind, "data": base64.b64encode(data).decode("ascii")}
    if name:
        part["name"] = name
    return part


# What a model loaded without a projector needs, as the CLI and the API say it (the window says it in its words).
REMOTE_TEXT_ONLY = "the server's model takes text only"  # refusal()'s no_projector for a remote backend's model
NO_PROJECTOR = ("it has no projector: load it with --mmproj PATH (its mmproj-*.gguf), or keep the mmproj file beside "
                "the model so the library pairs them")


def refusal(model: str, media: dict, kind: str, no_projector: str = NO_PROJECTOR) -> str | None:
    """Why a model cannot take a medium of `kind`, in one sentence, from its load description's `media` ({vision,
    audio, mmproj, mmproj_error}); None when it can. Said before a request goes (the CLI, the API, the window), so
    the user learns it from one sentence that names the model, not from the engine's refusal of the whole prompt.
    no_projector: what to do where the model was loaded without any projector."""
    able, verb = ("vision", "see images") if kind == "image" else ("audio", "hear sounds")
    if media.get(able):
        return None
    if media.get("mmproj"):
        other = "sounds" if kind == "image" else "images"
        why = f"its projector {media['mmproj']} takes {other} only"
    else:
        why = media.get("mmproj_error") or no_projector
    return f"{model} cannot {verb}: {why}.".replace("..", ".")


def has_media(messages: list[dict]) -> bool:
    return any(isinstance(m, dict) and isinstance(m.get("content"), list)
               and any(isinstance(p, dict) and p.get("type") in KINDS for p in m["content"]) for m in messages)


def flatten(messages: list[dict], marker: str) -> tuple[list[dict], list[Media]]:
    """(the messages with string contents, each medium written as `marker` where it stands; the media, checked,
    in the order of the markers). Refuses a message text that contains the marker itself: it would stand for a
    medium that is not there."""
    out, media = [], []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            if isinstance(content, str) and marker in content:
                raise MediaError(_MARKER_IN_TEXT.format(marker=marker))
            out.append(message)
            continue
        text, last_was_media = "", False
        for part in content:
            if not isinstance(part, dict):
                raise MediaError("A message part must be an object with a 'type'.")
            kind = part.get("type")
            if kind == "text":
                piece = part.get("text")
                if not isinstance(piece, str):
                    raise MediaError("A text part needs its 'text' as a string.")
                if marker in piece:
                    raise MediaError(_MARKER_IN_TEXT.format(marker=marker))
                if text and not last_was_media:
                    text += "\n"
                text += piece
                last_was_media = False
            elif kind in KINDS:
                if len(media) >= MAX_PARTS:
                    raise MediaError(f"A request may carry at most {MAX_PARTS} images and sounds.")
                media.append(check_part(part))
                text += marker
                last_was_media = True
            else:
                raise MediaError(f"A message part's type must be text, image or audio, not {str(kind)[:40]!r}.")
        out.append({**message, "content": text})
    return out, media


_MARKER_IN_TEXT = ("The message text contains '{marker}', which marks where an image or a sound goes; remove it "
                   "from the text.")


def check_part(part: dict) -> Media:
    """The medium a part carries, decoded from base64 and checked; MediaError in one sentence."""
    kind = part.get("type")
    data = part.get("data")
    name = part.get("name") if isinstance(part.get("name"), str) else ""
    label = f"'{name[:80]}'" if name else f"the {_noun(kind)}"
    if not isinstance(data, str) or not data:
        raise MediaError(f"{_cap(label)} has no data: send the file's bytes in base64.")
    if len(data) * 3 // 4 > MAX_FILE_BYTES:
        raise MediaError(f"{_cap(label)} is {_mb(len(data) * 3 // 4)}; {_a(kind)} may be at most "
                         f"{_mb(MAX_FILE_BYTES)}.")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError(f"The data of {label} is not base64.") from None
    return check_media(kind, raw, name)


def check_media(kind: str, data: bytes, name: str = "") -> Media:
    """The medium these bytes are, checked against `kind` and the bounds, from their headers alone."""
    label = f"'{name[:80]}'" if name else f"the {_noun(kind)}"
    if kind not in KINDS:
        raise MediaError(f"A medium must be an image or a sound, not {str(kind)[:40]!r}.")
    if len(data) > MAX_FILE_BYTES:
        raise MediaError(f"{_cap(label)} is {_mb(len(data))}; {_a(kind)} may be at most {_mb(MAX_FILE_BYTES)}.")
    fmt = sniff(data)
    if fmt is None:
        what = "an image (PNG, JPEG, GIF, BMP, WebP)" if kind == "image" else "a sound (WAV, MP3, FLAC)"
        raise MediaError(f"{_cap(label)} is not {what}: its first bytes are not one of those formats.")
    if (fmt in IMAGE_FORMATS) != (kind == "image"):
        raise MediaError(f"{_cap(label)} is {'an image' if fmt in IMAGE_FORMATS else 'a sound'} ({fmt}), sent as "
                         f"{'an image' if kind == 'image' else 'a sound'}.")
    try:
        if kind == "image":
            width, height = _IMAGE_SIZE[fmt](data)
            if width <= 0 or height <= 0:
                raise _Damaged("its header gives no size")
            if width * height > MAX_PIXELS:
                raise MediaError(f"{_cap(label)} is {width}x{height} pixels ({width * height / 1e6:.0f} MP); "
                                 f"images may have at most {MAX_PIXELS / 1e6:.0f} MP: scale it down first.")
            return Media(kind, fmt, data, width=width, height=height, name=name)
        seconds = _AUDIO_SECONDS[fmt](data)
        if seconds <= 0:
            raise _Damaged("it holds no sound")
        if seconds > MAX_AUDIO_SECONDS:
            raise MediaError(f"{_cap(label)} is {_duration(seconds)} long; a sound may be at most "
                             f"{_duration(MAX_AUDIO_SECONDS)}: cut it first.")
        return Media(kind, fmt, data, seconds=seconds, name=name)
    except _Damaged as why:
        raise MediaError(f"{_cap(label)} is a damaged {fmt} file: {why}.") from None
    except (struct.error, IndexError, ValueError):
        raise MediaError(f"{_cap(label)} is a damaged {fmt} file: its header ends early.") from None


def read_medium(kind: str, path: Path) -> Media:
    """A file read (never more than MAX_FILE_BYTES: a bigger one is a sentence, not a read) and checked, as the
    CLI's --image and the window's Attach take it; HearthError or MediaError in one sentence."""
    return check_media(kind, read_file(path, Budget(path.name, MAX_FILE_BYTES)), path.name)


def openai_part(part: dict) -> dict:
    """A seam part in OpenAI's chat shape, for a server that speaks it (the remote backend): text as text, an image
    as an image_url data URL, a sound as input_audio (its format in OpenAI's lower-case name)."""
    kind = part.get("type")
    if kind not in KINDS:
        return {"type": "text", "text": str(part.get("text", ""))}
    head = base64.b64decode(str(part.get("data", ""))[:32] + "==", validate=False)
    found = (sniff(head) or ("PNG" if kind == "image" else "WAV")).lower()
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": f"data:image/{found};base64,{part['data']}"}}
    return {"type": "input_audio", "input_audio": {"data": part["data"], "format": found}}


def sniff(data: bytes) -> str | None:
    """The format the first bytes say, or None."""
    head = data[:16]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if head.startswith(b"BM") and len(data) >= 26:
        return "BMP"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "WAV"
    if head.startswith(b"fLaC"):
        return "FLAC"
    if head.startswith(b"ID3") or (len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "MP3"
    return None


class _Damaged(Exception):
    pass


# --- images: the size from the header, and that the file is whole -----------------------------------------------
def _png_size(data: bytes) -> tuple[int, int]:
    if data[12:16] != b"IHDR":
        raise _Damaged("it does not start with its IHDR header")
    width, height = struct.unpack(">II", data[16:24])
    # Walk the chunks (lengths only, nothing inflated): a cut file has no IEND or a chunk past the end.
    at, seen_data = 8, False
    while True:
        if at + 8 > len(data):
            raise _Damaged("it is cut short (no IEND chunk)")
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if at + 12 + length > len(data):
            raise _Damaged(f"it is cut short inside its {kind.decode('latin-1')} chunk")
        seen_data = seen_data or kind == b"IDAT"
        if kind == b"IEND":
            break
        at += 12 + length
    if not seen_data:
        raise _Damaged("it has no image data (IDAT)")
    return width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    at, size = 2, None
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            raise _Damaged("a segment does not start where the previous one ends")
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        length = struct.unpack(">H", data[at + 2:at + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
            height, width = struct.unpack(">HH", data[at + 5:at + 9])
            size = (width, height)
        if marker == 0xDA:  # start of scan: the entropy-coded data follows, up to the end-of-image marker
            if size is None:
                raise _Damaged("its scan comes before its size")
            if data.rfind(b"\xff\xd9") < at:
                raise _Damaged("it is cut short (no end-of-image marker)")
            return size
        at += 2 + length
    raise _Damaged("it is cut short before its image data")


def _gif_size(data: bytes) -> tuple[int, int]:
    if len(data) < 14 or b"," not in data[13:]:
        raise _Damaged("it has no image")
    return struct.unpack("<HH", data[6:10])


def _bmp_size(data: bytes) -> tuple[int, int]:
    declared = struct.unpack("<I", data[2:6])[0]
    if declared and declared > len(data):
        raise _Damaged(f"it says it is {declared:,} bytes but holds {len(data):,}")
    header = struct.unpack("<I", data[14:18])[0]
    if header == 12:
        width, height = struct.unpack("<HH", data[18:22])
    else:
        width, height = struct.unpack("<ii", data[18:26])
    return abs(width), abs(height)


def _webp_size(data: bytes) -> tuple[int, int]:
    kind = data[12:16]
    if kind == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if kind == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    raise _Damaged("its first chunk is not an image")


_IMAGE_SIZE = {"PNG": _png_size, "JPEG": _jpeg_size, "GIF": _gif_size, "BMP": _bmp_size, "WebP": _webp_size}


# --- sounds: the length from the header ---------------------------------------------------------------------------
def _wav_seconds(data: bytes) -> float:
    at, rate, frame = 12, 0, 0
    while at + 8 <= len(data):
        kind, length = struct.unpack("<4sI", data[at:at + 8])
        if kind == b"fmt ":
            channels, rate = struct.unpack("<HI", data[at + 10:at + 16])
            bits = struct.unpack("<H", data[at + 22:at + 24])[0]
            frame = channels * max(bits // 8, 1)
        elif kind == b"data":
            if not rate or not frame:
                raise _Damaged("its data comes before its format")
            held = min(length, len(data) - at - 8)
            return held / (rate * frame)
        at += 8 + length + (length & 1)
    raise _Damaged("it has no sound data")


_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_MP3_KBPS = {  # (MPEG-1, layer III) and (MPEG-2/2.5, layer III)
    True: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    False: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}


def _mp3_seconds(data: bytes) -> float:
    at = 0
    if data.startswith(b"ID3") and len(data) >= 10:
        size = data[6:10]
        at = 10 + ((size[0] << 21) | (size[1] << 14) | (size[2] << 7) | size[3])
    seconds, frames = 0.0, 0
    while at + 4 <= len(data):
        b1, b2 = data[at + 1], data[at + 2]
        if data[at] != 0xFF or b1 & 0xE0 != 0xE0:
            if frames:
                break  # a trailing tag
            at += 1  # padding before the first frame
            continue
        version = (b1 >> 3) & 3
        rate_index, kbps_index = (b2 >> 2) & 3, b2 >> 4
        if version == 1 or rate_index == 3 or kbps_index in (0, 15) or (b1 >> 1) & 3 != 1:
            if frames:
                break
            at += 1
            continue
        rate = _MP3_RATES[version][rate_index]
        mpeg1 = version == 3
        samples = 1152 if mpeg1 else 576
        length = (samples // 8) * _MP3_KBPS[mpeg1][kbps_index] * 1000 // rate + ((b2 >> 1) & 1)
        seconds += samples / rate
        frames += 1
        at += max(length, 1)
    if not frames:
        raise _Damaged("no MPEG audio frame was found")
    return seconds


def _flac_seconds(data: bytes) -> float:
    if data[4] & 0x7F != 0:
        raise _Damaged("its first block is not STREAMINFO")
    info = data[8:8 + 34]
    bits = int.from_bytes(info[10:18], "big")
    rate = bits >> 44
    total = bits & ((1 << 36) - 1)
    if not rate:
        raise _Damaged("its sample rate is 0")
    if len(data) <= 8 + 34:
        raise _Damaged("it holds no audio frames")
    return total / rate


_AUDIO_SECONDS = {"WAV": _wav_seconds, "MP3": _mp3_seconds, "FLAC": _flac_seconds}


def _noun(kind: str) -> str:
    return "image" if kind == "image" else "sound"


def _a(kind: str) -> str:
    return "an image" if kind == "image" else "a sound"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"
