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


def mib_as_mb(mib: float) -> str:
    """A figure kept in MiB (memory, as the OS counts pages) said in the decimal MB that file sizes use, so that
    "Weights" in a fit estimate reads against the file's size in the model list without a second unit."""
    return f"{mib * 2**20 / 1e6:,.0f} MB"
