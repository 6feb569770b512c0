"""The texts the context-window benchmarks read: a request for an endless answer, and long prose for perplexity.
Shared by `hearth bench window` (app/bench/window.py) and its policy comparison (app/bench/window_policies.py)."""

from __future__ import annotations

SYSTEM = "You are a storyteller who never stops."
REQUEST = "Tell me an endless story about a lighthouse keeper and the sea."


def long_text() -> str:
    """Prose that ships with every Python: the reference manual's pages behind help()."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in ("compound", "specialnames", "types"))
