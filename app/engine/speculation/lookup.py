"""Prompt-lookup drafts: continue the text from the last place where the current n-gram already occurred.

No second model: the prompt and the answer so far are the draft source. That pays off when the answer repeats
its input (editing code, quoting, summarising with the source's wording) and costs nothing when no n-gram matches.
"""

from __future__ import annotations

from app.engine.speculation.drafter import Drafter


class LookupDrafter(Drafter):
    name = "lookup"
    follows_kv = False  # drafts come from the token list, not from a KV cache
    # Longer matches predict better; a single token matches too often to be worth a verify batch.
    max_ngram = 4
    min_ngram = 2

    def __init__(self):
        self.seq: list[int] = []
        # index[n][ngram] -> position just after the latest earlier occurrence of that n-gram
        self._index: list[dict[tuple, int]] = [{} for _ in range(self.max_ngram + 1)]
        self._indexed = 0  # seq[:_indexed + ...] n-grams ending before this position are in the index

    def begin(self, history: list[int]) -> None:
        self.seq = list(history)
        self._index = [{} for _ in range(self.max_ngram + 1)]
        self._indexed = 0

    def advance(self, tokens: list[int]) -> None:
        self.seq.extend(tokens)

    def _catch_up(self) -> None:
        # Index every n-gram that ends before the last token, so a lookup never finds the current end itself.
        seq = self.seq
        end = len(seq) - 1
        index = self._index
        lo, hi = self.min_ngram, self.max_ngram
        for stop in range(self._indexed + 1, end + 1):
            for n in range(lo, min(hi, stop) + 1):
                index[n][tuple(seq[stop - n : stop])] = stop
        self._indexed = max(self._indexed, end)

    def propose(self, k: int) -> list[int]:
        self._catch_up()
        seq = self.seq
        length = len(seq)
        for n in range(min(self.max_ngram, length), self.min_ngram - 1, -1):
            at = self._index[n].get(tuple(seq[length - n :]))
            if at is not None:
                draft = seq[at : at + k]
                # An image or a sound in the history is placeholders (app/engine/media/prompt.py), never a draft.
                cut = next((i for i, tok in enumerate(draft) if tok < 0), len(draft))
                return draft[:cut]
        return []

    def close(self) -> None:
        self.seq = []
