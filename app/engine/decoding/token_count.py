"""How many tokens a text is for a model, without loading its weights.

Deciding whether an attached document fits the context (app/docs/attach.py) needs the chat model's own token
count, before the prompt goes to the engine. Only the vocabulary is read (vocab_only: milliseconds, a few MB),
in the caller's process; a model Hearth cannot read that way (a remote endpoint's) is estimated instead.
"""

from __future__ import annotations

import threading
from pathlib import Path

import llama_cpp

from app.core.errors import ModelLoadError
from app.engine.speculation.vocab_compat import VocabOnly

CHARS_PER_TOKEN = 4.0  # the estimate for English prose where no vocabulary is at hand


class TokenCounter:
    def __init__(self, model_path: str | Path | None):
        """model_path None (or a file llama.cpp cannot read): an estimate of CHARS_PER_TOKEN characters a token
        (exact is False)."""
        self._lock = threading.Lock()  # one llama_tokenize at a time on the shared vocabulary
        self._read = None
        if model_path:
            try:
                self._read = VocabOnly(Path(model_path))
            except ModelLoadError:
                pass
        self.vocab = self._read.vocab if self._read is not None else None

    @property
    def exact(self) -> bool:
        return self.vocab is not None

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self.vocab is None:
            return max(1, round(len(text) / CHARS_PER_TOKEN))
        data = text.encode("utf-8", "replace")
        with self._lock:
            # A first call with no room returns minus the number of tokens needed.
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), None, 0, False, False)
            if n >= 0:
                return n
            buf = (llama_cpp.llama_token * -n)()
            return llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, -n, False, False)

    def close(self) -> None:
        if self._read is not None:
            self._read.close()
            self._read = None
            self.vocab = None
