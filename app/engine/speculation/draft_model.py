"""Drafts from a second, smaller GGUF model that shares the target's vocabulary.

The draft model has its own context in the same process. Its KV cache follows the target's accepted tokens:
each round evaluates only what it has not seen (the new token, and a fully accepted draft's last token),
and drafts that the target rejected are removed from it, so history is never evaluated twice.
"""

from __future__ import annotations

from dataclasses import replace

import llama_cpp
import numpy as np

from app.core.library.fit import draft_context
from app.core.gguf.info import read_gguf_info
from app.engine.decoding.decode import Decoder, common_prefix
from app.engine.speculation.drafter import Drafter
from app.protocol.messages import LoadOptions
from app.engine.decoding.runtime import Runtime
from app.engine.speculation.spec_calibration import calibration, costs_of, draft_fields, measure_target
from app.engine.speculation.vocab_compat import check_draft_compatible


class DraftModelDrafter(Drafter):
    name = "draft-model"
    follows_kv = True

    def __init__(self, target_options: LoadOptions, draft_path: str, extra_bufts: bool, n_ctx: int):
        check_draft_compatible(target_options.model_path, draft_path)
        # Same threads and placement as the target; no speculation options of its own. Its context is the one it
        # needs (app/core/fit.draft_context, which the fit counts): the target's, up to what the draft was trained
        # for, and one sequence (drafts serve the one-request loop; parallel slots draft from lookup or a prediction).
        n_ctx = draft_context(n_ctx, read_gguf_info(draft_path))
        options = replace(target_options, model_path=str(draft_path), n_ctx=n_ctx, n_parallel=1, draft_model=None,
                          lookup=False)
        self.rt = Runtime(options, extra_bufts=extra_bufts)
        self.decoder = Decoder(self.rt)
        self.seq: list[int] = []
        self._confirmed: int | None = None
        self.n_vocab = self.rt.n_vocab
        # Seconds of one draft token, from the kept calibration (app/engine/speculation/spec_calibration.py).
        self.step_s = 0.0

    @property
    def model_name(self) -> str:
        return self.rt.path.name

    def begin(self, history: list[int]) -> None:
        self.seq = list(history)
        self._confirmed = None

    def advance(self, tokens: list[int]) -> None:
        self.seq.extend(tokens)

    def _sync(self) -> None:
        """Make the draft KV hold exactly `seq`, evaluating only what it lacks; logits for the last token."""
        dec = self.decoder
        seq = self.seq
        if self._confirmed is None:  # a new turn or a moved window: compare once in full
            keep = common_prefix(dec.tokens, seq)
        else:
            # Everything before _confirmed is known to agree; rejected drafts start after it.
            keep = self._confirmed
            n = min(len(dec.tokens), len(seq))
            while keep < n and dec.tokens[keep] == seq[keep]:
                keep += 1
        keep = min(keep, len(seq) - 1)  # the last token is evaluated again for fresh logits
        if keep < len(dec.tokens) and not dec.truncate(keep):
            dec.reset()
            keep = 0
        dec.eval_tokens(seq[keep:])
        self._confirmed = len(seq)

    def propose(self, k: int) -> list[int]:
        if k <= 0 or not self.seq:
            return []
        if len(self.seq) + k > self.rt.n_ctx:
            return []
        self._sync()
        dec = self.decoder
        ctx = self.rt.ctx
        out: list[int] = []
        for i in range(k):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(self.n_vocab,))
            tok = int(logits.argmax())
            out.append(tok)
            if i == k - 1 or dec.is_eog(tok):
                break
            dec.eval_tokens([tok])
        return out

    def measure(self, renew: bool = False) -> float:
        """One draft token's cost: kept per draft model and machine, measured the first time (a plain step of
        the draft model, which leaves its KV empty). Fixed, so that the verify schedule never depends on a
        timing taken during an answer."""
        entry = calibration(draft_fields(self.rt), lambda threads: measure_target(self.decoder, threads, sizes=(1,)),
                            renew)
        self.step_s = costs_of(entry)[1]
        return self.step_s

    def close(self) -> None:
        self.decoder.close()
        self.rt.close()
