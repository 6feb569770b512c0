"""Seeded images and sounds that models tell apart: what `hearth bench media` feeds a model, and what the tests feed
the tiny ones (tests/helpers/tiny_media.py)."""

from __future__ import annotations

import io
import struct
import wave
import zlib


def png_bytes(width: int, height: int, seed: int) -> bytes:
    """A PNG of random RGB pixels (seeded): two seeds are two images a vision model tells apart."""
    import numpy as np

    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _png_chunk(b"IDAT", zlib.compress(raw)) + _png_chunk(b"IEND", b""))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def wav_bytes(seconds: float, seed: int, rate: int = 16000) -> bytes:
    """A mono 16-bit WAV of a seeded chord with noise: two seeds are two sounds."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    tones = sum(np.sin(2 * np.pi * f * t) for f in rng.uniform(200, 2000, size=3))
    signal = 0.25 * tones / 3 + 0.05 * rng.standard_normal(t.size)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()
