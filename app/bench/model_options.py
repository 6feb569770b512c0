"""The options every benchmark of one model shares: which model, and on what part of the machine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelOptions:
    model: str  # a GGUF file
    threads: int | None = None  # None: physical cores
    gpu_layers: int = 0
