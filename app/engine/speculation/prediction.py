"""Predicted outputs: a text the answer will mostly repeat (OpenAI's `prediction`, `hearth chat --predict`,
the window's regenerate and edit-and-resend) is the draft source.

The prediction is aligned to the answer as it goes: while the answer follows it, the next predicted tokens are
the draft; where the answer departs (an inserted line, a deleted one, a changed word), the drafter finds the
answer's latest few tokens in the prediction again, preferring the place after the last one it matched, so that
drafting resumes after the edit instead of ending at it. Only the verify ever decides a token: a wrong
prediction costs speed, never the answer.
"""

from __future__ import annotations

from bisect import bisect_left

from app.engine.speculation.drafter import Drafter
from app.engine.speculation.speculative import Speculator

MAX_NGRAM = 4
MIN_NGRAM = 2
# A single matching token realigns only this close after the last match: one token matches too often further
# away, and a substituted word is found again by it at once.
NEAR = 8
# A prediction is meant to be right: every answer starts from this acceptance (accepted, rejecting verifies).
PRIOR = (8.0, 1.0)
K_CAP = 32  # a right prediction pays with long drafts; the calibration measures batches up to 33 tokens


class PredictionDrafter(Drafter):
    name = "prediction"
    follows_kv = False  # drafts come from the prediction's tokens, free to check against plain steps
    prior = PRIOR
    optimistic_alpha = 0.98  # a right prediction is the answer: nearly every draft is accepted

    def __init__(self, predicted: list[int]):
        self.pred = list(predicted)
        # n -> n-gram -> sorted positions just after each of its occurrences in the prediction
        self._index: list[dict[tuple, list[int]]] = [{} for _ in range(MAX_NGRAM + 1)]
        for n in range(1, MAX_NGRAM + 1):
            for end in range(n, len(self.pred) + 1):
                self._index[n].setdefault(tuple(self.pred[end - n : end]), []).append(end)
        self.begin([])

    def begin(self, history: list[int]) -> None:
        """A new answer (the history is its prompt, which a prediction does not draw on): expect its start."""
        self.tail: list[int] = []
        self.cursor: int | None = 0  # index of the next predicted token; None while the answer is off it
        self.anchor = 0  # just after the last predicted token the answer matched
        self.matched = 0  # answer tokens that came where the prediction put them

    def advance(self, tokens: list[int]) -> None:
        pred = self.pred
        for tok in tokens:
            self.tail.append(tok)
            if len(self.tail) > 2 * MAX_NGRAM:
                del self.tail[:MAX_NGRAM]
            c = self.cursor
            if c is not None and c < len(pred) and pred[c] == tok:
                self.cursor = self.anchor = c + 1
                self.matched += 1
            else:
                self.cursor = self._realign()

    def _realign(self) -> int | None:
        """Where the prediction continues after the answer's latest tokens: the longest n-gram match, its first
        occurrence at or after the anchor (else its last one before); a lone token only just after the anchor."""
        tail = self.tail
        for n in range(min(MAX_NGRAM, len(tail)), MIN_NGRAM - 1, -1):
            ends = self._index[n].get(tuple(tail[-n:]))
            if ends:
                i = bisect_left(ends, self.anchor)
                end = ends[i] if i < len(ends) else ends[-1]
                self.anchor = end
                return end
        ends = self._index[1].get((tail[-1],)) if tail else None
        if ends:
            i = bisect_left(ends, self.anchor)
            if i < len(ends) and ends[i] - self.anchor <= NEAR:
                self.anchor = ends[i]
                return ends[i]
        return None

    def propose(self, k: int) -> list[int]:
        c = self.cursor
        if c is None or k <= 0:
            return []
        return self.pred[c : c + k]

    def report(self, generated: list[int]) -> dict:
        """OpenAI's accepted and rejected prediction tokens: the answer's tokens that came where the prediction
        put them, and the prediction's tokens that the answer did not use. Counted on the finished answer, so
        they do not depend on which drafts this machine found worth verifying."""
        self.begin([])  # replayed from the start: the answer is finished, the drafter has done its work
        self.advance(generated)
        return {"prediction": {"accepted": self.matched, "rejected": len(self.pred) - self.matched}}


def prediction_speculator(decoder, text: str) -> Speculator:
    """A speculator for one answer whose prediction is `text`, calibrated from the kept costs (measured first,
    in a second or two, if this model was never calibrated on this machine)."""
    rt = decoder.rt
    tokens = rt.tokenize(text, add_special=False, parse_special=False)
    speculator = Speculator(PredictionDrafter(tokens), k_cap=K_CAP)
    speculator.calibrate(decoder)
    return speculator
