"""The options every benchmark of one model shares: which model, and on what part of the machine."""

from __future__ import annotations

from dataclasses import dataclass

from app.protocol.option_fields import accepted
from app.protocol.option_spec import Bound

CONTEXT, SLOTS = accepted("n_ctx"), accepted("n_parallel")  # as LoadOptions declares them
# A benchmark's --ctx: the contexts a load takes.
CONTEXT_BOUND = Bound(*CONTEXT, takes=f"a context of {CONTEXT[0]:g} to {CONTEXT[1]:,.0f} tokens")


@dataclass
class ModelOptions:
    model: str  # a GGUF file
    threads: int | None = None  # None: physical cores
    gpu_layers: int = 0
