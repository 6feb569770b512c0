"""Sizes as people read them, the same in the terminal and the window."""

from __future__ import annotations


def human_size(n: int | float | None) -> str:
    """Bytes in decimal units (1 MB = 1,000,000 bytes), as file managers and the Hugging Face Hub show them."""
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return "?"
