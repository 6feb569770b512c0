"""Media at the edge (app/protocol/media.py): every bad image or sound is one sentence within a second, judged from
its header without decoding it, before anything else reads it."""

from __future__ import annotations

import base64
import struct
import time
import tracemalloc
import zlib

import pytest

from app.bench.sample_media import png_bytes, wav_bytes
from app.protocol.media import (MAX_AUDIO_SECONDS, MediaError, check_media, check_part, flatten, has_media,
                                media_part, sniff)

MARKER = "<__media__>"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(side: int = 20000) -> bytes:
    """A PNG of side x side black pixels: about 1 MB on disk, 1.2 GB once decoded."""
    row = b"\0" * (1 + side * 3)
    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", data) + _chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return bomb_png()


def timed(kind: str, data: bytes, name: str = "") -> tuple[str, float, int]:
    """The refusal's sentence, the seconds it took and the peak bytes it allocated."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(MediaError) as info:
            check_media(kind, data, name)
    finally:
        took = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return str(info.value), took, peak


def test_a_decompression_bomb_is_refused_from_its_header(bomb):
    message, took, peak = timed("image", bomb, "bomb.png")
    assert message == ("'bomb.png' is 20000x20000 pixels (400 MP); images may have at most 40 MP: scale it down "
                       "first.")
    assert took < 1.0 and peak < 1_000_000  # nothing decoded: microseconds and no pixel buffer


def test_a_truncated_png_a_text_file_and_a_wrong_kind_are_one_sentence_each():
    png = png_bytes(128, 128, 1)
    message, took, _ = timed("image", png[: len(png) // 2], "cut.png")
    assert message == "'cut.png' is a damaged PNG file: it is cut short inside its IDAT chunk."
    message, _, _ = timed("image", b"This is a text file that someone named picture.png\n" * 20, "picture.png")
    assert message == ("'picture.png' is not an image (PNG, JPEG, GIF, BMP, WebP): its first bytes are not one of "
                       "those formats.")
    message, _, _ = timed("image", wav_bytes(1.0, 1), "note.wav")
    assert message == "'note.wav' is a sound (WAV), sent as an image."
    message, _, _ = timed("audio", png, "")
    assert message == "The sound is an image (PNG), sent as a sound."
    assert took < 1.0


def test_ten_minutes_of_audio_are_refused_from_the_header():
    ten_minutes = wav_bytes(1.0, 1)
    # The same header saying 600 s: the data chunk's length is what a reader trusts.
    head, data = ten_minutes[:44], b"\0" * (600 * 16000 * 2)
    head = head[:40] + struct.pack("<I", len(data))
    message, took, _ = timed("audio", head + data, "lecture.wav")
    assert message == ("'lecture.wav' is 10 min 0 s long; a sound may be at most "
                       f"{int(MAX_AUDIO_SECONDS) // 60} min 0 s: cut it first.")
    assert took < 1.0


def test_good_media_pass_with_their_size():
    image = check_media("image", png_bytes(96, 64, 2))
    assert (image.format, image.width, image.height) == ("PNG", 96, 64)
    sound = check_media("audio", wav_bytes(2.0, 1))
    assert sound.format == "WAV" and sound.seconds == pytest.approx(2.0)
    assert sniff(b"\xff\xd8\xff\xe0") == "JPEG" and sniff(b"GIF89a") == "GIF" and sniff(b"fLaC") == "FLAC"


def test_parts_become_markers_by_llama_cpp_s_joining_rule():
    image = media_part("image", png_bytes(32, 32, 1), "a.png")
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Look:"}, image,
                                             {"type": "text", "text": "What is it?"}, {"type": "text", "text": "Go."}]}]
    assert has_media(messages) and not has_media(messages[:1])
    flat, media = flatten(messages, MARKER)
    assert flat[0] == messages[0]
    assert flat[1]["content"] == f"Look:{MARKER}What is it?\nGo."  # no newline around a medium, one between texts
    assert [m.name for m in media] == ["a.png"]


def test_a_marker_typed_in_the_text_and_bad_parts_are_refused():
    with pytest.raises(MediaError, match="contains '<__media__>'"):
        flatten([{"role": "user", "content": [{"type": "text", "text": f"say {MARKER}"},
                                              media_part("image", png_bytes(8, 8, 1))]}], MARKER)
    with pytest.raises(MediaError, match="not base64"):
        check_part({"type": "image", "data": "@@@@"})
    # A part named by where it stands in a request reads as a sentence (it said "'messages[0]''s data").
    with pytest.raises(MediaError, match=r"^The data of 'messages\[0\]' is not base64\.$"):
        check_part({"type": "image", "data": "@@@@", "name": "messages[0]"})
    with pytest.raises(MediaError, match="type must be text, image or audio"):
        flatten([{"role": "user", "content": [{"type": "video", "data": "AAAA"}]}], MARKER)
    with pytest.raises(MediaError, match="has no data"):
        check_part({"type": "image"})
    assert check_part({"type": "image", "data": base64.b64encode(png_bytes(8, 8, 1)).decode()}).width == 8


def test_every_format_s_size_and_length_come_from_its_header():
    PIL = pytest.importorskip("PIL.Image")
    import io

    for fmt, pil in (("JPEG", "JPEG"), ("GIF", "GIF"), ("BMP", "BMP"), ("WebP", "WEBP"), ("PNG", "PNG")):
        buf = io.BytesIO()
        PIL.new("RGB", (97, 43), (10, 200, 30)).save(buf, pil)
        image = check_media("image", buf.getvalue())
        assert (image.format, image.width, image.height) == (fmt, 97, 43), fmt
    # MP3: 100 frames of MPEG-1 layer III, 128 kb/s at 44.1 kHz (417 bytes, 1152 samples each), after an ID3 tag.
    frame = b"\xff\xfb\x90\x64" + b"\0" * 413
    mp3 = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + b"\0" * 10 + frame * 100
    assert check_media("audio", mp3).seconds == pytest.approx(100 * 1152 / 44100)
    # FLAC: STREAMINFO says 16 kHz and 48,000 samples: 3 s.
    info = bytearray(34)
    info[10:18] = ((16000 << 44) | 48000).to_bytes(8, "big")  # rate (20 bits) ... total samples (36 bits)
    flac = b"fLaC" + bytes([0x80, 0, 0, 34]) + bytes(info) + b"\xff\xf8" + b"\0" * 20
    assert check_media("audio", flac).seconds == pytest.approx(3.0)
    with pytest.raises(MediaError, match="damaged MP3 file: no MPEG audio frame was found"):
        check_media("audio", b"ID3\x04\x00\x00\x00\x00\x00\x0a" + b"\0" * 40)
