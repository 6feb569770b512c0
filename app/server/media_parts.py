"""Images and sounds in each API dialect's own shapes, read into the seam's parts (app/protocol/media.py).

- chat completions: {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} and
  {"type": "input_audio", "input_audio": {"data": "<base64>", "format": "wav" | "mp3"}};
- the Responses API: {"type": "input_image", "image_url": "data:image/png;base64,..."} and the same input_audio;
- Anthropic's Messages: {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ...}};
- Ollama's API: a message's (or /api/generate's) "images": ["<base64>", ...].

Each part is checked here, at the edge (check_part: from its header, never decoded), so a decompression bomb, a
damaged file or a text file named .png is a 400 in the dialect's own shape before a model is chosen or loaded. A
link is refused in a sentence: the server fetches nothing from the network (a URL in a request would have it
fetch whatever a client names, from wherever the server stands). An API part has no file name, so it is named by
its field ('messages[0].content[1]'): every sentence about it, here and in the engine, says which part it is, and
a refusal's param is that field.

A medium sent to a model that cannot take it (no projector, or a projector for the other kind) is a 400 that names
the model and why (refuse_unless_takes), said from the loaded model's description before the engine is asked.
"""

from __future__ import annotations

from typing import Any

from app.protocol.media import KINDS, MediaError, check_part, refusal
from app.server.edge.errors import invalid

# OpenAI's input_audio formats are wav and mp3; libmtmd also decodes FLAC, so it is taken too. The bytes decide
# what a file is (check_part sniffs them): the format named is checked for its spelling only.
AUDIO_FORMATS = ("wav", "mp3", "flac")
DATA_URL_EXAMPLE = "data:image/png;base64,..."


def _medium(kind: str, data: Any, where: str, role: Any) -> dict:
    """The seam's part for one medium, checked; a 400 naming `where` in one sentence."""
    if role != "user":
        raise invalid(f"'{where}': images and sounds go in user messages; a {str(role)[:20]} message takes text "
                      "only.", where)
    part = {"type": kind, "data": data, "name": where}
    try:
        check_part(part)
    except MediaError as exc:
        raise invalid(str(exc), where, code="invalid_media") from None
    return part


def data_url(url: Any, where: str, kind: str = "image") -> str:
    """The base64 of a data URL (data:image/png;base64,...); a sentence for a link or anything else."""
    noun = "image" if kind == "image" else "sound"
    if not isinstance(url, str) or not url.strip():
        raise invalid(f"'{where}' must be the {noun} as a data URL ({DATA_URL_EXAMPLE}).", where)
    scheme = url[:url.find(":")].strip().lower() if 0 < url.find(":") <= 12 else ""
    if not scheme:
        raise invalid(f"'{where}' must be the {noun} as a data URL ({DATA_URL_EXAMPLE}).", where)
    if scheme != "data":
        raise invalid(f"'{where}' is a link, not a data URL: this server fetches nothing from the network; send the "
                      f"{noun} in the request as a data URL ({DATA_URL_EXAMPLE}).", where, code="url_not_supported")
    head, comma, data = url.partition(",")
    if not comma or not head.strip().lower().endswith(";base64"):
        raise invalid(f"'{where}' must be a base64 data URL ({DATA_URL_EXAMPLE}).", where)
    return data


def _input_audio(part: dict, where: str, role: Any) -> dict:
    """OpenAI's input_audio part (chat completions and Responses alike)."""
    audio = part.get("input_audio")
    shape = "{\"data\": \"<base64>\", \"format\": \"wav\" or \"mp3\"}"
    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
        raise invalid(f"'{where}.input_audio' must be {shape}.", f"{where}.input_audio")
    if audio.get("format") not in AUDIO_FORMATS:
        raise invalid(f"'{where}.input_audio.format' must be wav, mp3 or flac; got {str(audio.get('format'))[:20]!r}.",
                      f"{where}.input_audio.format")
    return _medium("audio", audio["data"], where, role)


# --- each dialect's parts -----------------------------------------------------------------------------------------
def openai_part(part: dict, where: str, role: Any) -> dict | None:
    """The seam's part for a chat completions part that carries a medium; None for any other part. The seam's own
    parts (type image or audio: what the Responses and Ollama readers hand on) are checked again, as any part."""
    kind = part.get("type")
    if kind == "image_url":
        image = part.get("image_url")
        if isinstance(image, dict):
            return _medium("image", data_url(image.get("url"), f"{where}.image_url.url"), where, role)
        return _medium("image", data_url(image, f"{where}.image_url"), where, role)
    if kind == "input_audio":
        return _input_audio(part, where, role)
    if kind in KINDS:
        return _medium(kind, part.get("data"), part.get("name") or where, role)
    return None


def responses_part(part: dict, where: str, role: Any) -> dict | None:
    """The seam's part for a Responses API content part that carries a medium; None for any other part."""
    kind = part.get("type")
    if kind == "input_image":
        if part.get("file_id") and not part.get("image_url"):
            raise invalid(f"'{where}.file_id': this server has no Files API; send the image in the request as a data "
                          f"URL in image_url ({DATA_URL_EXAMPLE}).", f"{where}.file_id", code="unsupported_content")
        return _medium("image", data_url(part.get("image_url"), f"{where}.image_url"), where, role)
    if kind == "input_audio":
        return _input_audio(part, where, role)
    return None


def anthropic_image(block: dict, where: str, role: Any) -> dict:
    """The seam's part for an Anthropic image block with a base64 source."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    shape = "{\"type\": \"base64\", \"media_type\": \"image/png\", \"data\": \"<base64>\"}"
    if kind == "url":
        raise invalid(f"'{where}.source' is a URL: this server fetches nothing from the network; send the image in "
                      f"the request as a base64 source, {shape}.", f"{where}.source")
    if kind == "file":
        raise invalid(f"'{where}.source': this server has no Files API; send the image as a base64 source, {shape}.",
                      f"{where}.source")
    if kind != "base64":
        raise invalid(f"'{where}.source' must be {shape}.", f"{where}.source")
    media_type = source.get("media_type")
    if not isinstance(media_type, str) or not media_type.lower().startswith("image/"):
        raise invalid(f"'{where}.source.media_type' must be an image type (image/jpeg, image/png, image/gif, "
                      "image/webp).", f"{where}.source.media_type")
    return _medium("image", source.get("data"), where, role)


def ollama_images(images: Any, where: str, role: Any) -> list[dict]:
    """The seam's parts for Ollama's `images` (base64 strings; a data URL is taken too)."""
    if images is None:
        return []
    if not isinstance(images, list):
        raise invalid(f"'{where}' must be a list of base64-encoded images.", where)
    parts = []
    for k, image in enumerate(images):
        at = f"{where}[{k}]"
        if isinstance(image, str) and 0 < image.find(":") <= 12:  # base64 has no ':': a data URL or a link
            image = data_url(image, at)
        parts.append(_medium("image", image, at, role))
    return parts


# --- the model that answers -----------------------------------------------------------------------------------------
def first_media(messages: list[dict]) -> dict[str, str]:
    """{kind: the field of the first part of that kind} of seam messages (a part is named by its field)."""
    found: dict[str, str] = {}
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind in KINDS and kind not in found:
                    found[kind] = part.get("name") or "messages"
    return found


def refuse_unless_takes(messages: list[dict], model: str, info: dict | None) -> None:
    """A 400 that names the model and why, where the request holds a medium the loaded model cannot take. A backend
    that does not describe its media (a remote server) is left to answer for itself."""
    media = (info or {}).get("media")
    if media is None:
        return
    for kind, where in first_media(messages).items():
        why = refusal(model, media, kind)
        if why:
            raise invalid(why, where, code="media_not_supported")


def modalities(info: dict | None = None, abilities: list[str] | None = None) -> list[str]:
    """The inputs a model takes, for /v1/models: from a loaded model's description, else from the library's
    pairing of its projector ("sees images", "hears audio")."""
    if info is not None and isinstance(info.get("media"), dict):
        media = info["media"]
        return ["text", *(["image"] if media.get("vision") else []), *(["audio"] if media.get("audio") else [])]
    abilities = abilities or []
    return ["text", *(["image"] if "sees images" in abilities else []),
            *(["audio"] if "hears audio" in abilities else [])]
