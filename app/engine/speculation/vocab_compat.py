"""Can a draft model propose tokens for a target? llama.cpp's own rule, checked before anything heavy loads.

The rule (common/speculative.cpp): same tokenizer type, same BOS/EOS (ids and whether they are added),
vocabulary sizes within 128 of each other, and the same text for every token from id 5 on.
Only the vocabularies are read (vocab_only), so a refusal costs milliseconds and leaves nothing loaded.
"""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from app.core.errors import ModelLoadError
from app.core.gguf.modelfile import check_model_file
from app.engine.decoding.runtime import ensure_backend, explain_load_failure

MAX_SIZE_DIFFERENCE = 128
CHECK_FROM_ID = 5
_TYPES = {llama_cpp.LLAMA_VOCAB_TYPE_SPM: "SentencePiece", llama_cpp.LLAMA_VOCAB_TYPE_BPE: "BPE",
          llama_cpp.LLAMA_VOCAB_TYPE_WPM: "WordPiece", llama_cpp.LLAMA_VOCAB_TYPE_UGM: "Unigram",
          llama_cpp.LLAMA_VOCAB_TYPE_RWKV: "RWKV"}


class VocabOnly:
    """A model's vocabulary alone (vocab_only: milliseconds, a few MB, no weights); ModelLoadError if unreadable."""

    def __init__(self, path: Path):
        ensure_backend()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.path = path
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise ModelLoadError(explain_load_failure(path))
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)

    def text(self, token: int) -> str:
        raw = llama_cpp.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""

    def close(self) -> None:
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None


def first_difference(target: VocabOnly, draft: VocabOnly) -> str | None:
    """The first way the two vocabularies differ, as a phrase; None if the draft may be used."""
    tv, dv = target.vocab, draft.vocab
    vt, vd = llama_cpp.llama_vocab_type(tv), llama_cpp.llama_vocab_type(dv)
    if vt != vd:
        return f"its tokenizer is {_TYPES.get(vd, vd)}, the target's is {_TYPES.get(vt, vt)}"
    for what, fn in (("adds a BOS token", llama_cpp.llama_vocab_get_add_bos),
                     ("adds an EOS token", llama_cpp.llama_vocab_get_add_eos)):
        if bool(fn(tv)) != bool(fn(dv)):
            return f"one model {what} and the other does not"
    for what, fn in (("BOS", llama_cpp.llama_vocab_bos), ("EOS", llama_cpp.llama_vocab_eos)):
        if fn(tv) != fn(dv):
            return f"its {what} token is id {fn(dv)}, the target's is id {fn(tv)}"
    nt, nd = llama_cpp.llama_vocab_n_tokens(tv), llama_cpp.llama_vocab_n_tokens(dv)
    if abs(nt - nd) > MAX_SIZE_DIFFERENCE:
        return f"its vocabulary has {nd} tokens, the target's {nt} (more than {MAX_SIZE_DIFFERENCE} apart)"
    get = llama_cpp.llama_vocab_get_text
    for token in range(CHECK_FROM_ID, min(nt, nd)):
        a, b = get(tv, token), get(dv, token)
        if a != b:
            return (f"token {token} is {draft.text(token)!r} in the draft but {target.text(token)!r} "
                    f"in the target")
    return None


def check_draft_compatible(target_path: str | Path, draft_path: str | Path) -> None:
    """Raise ModelLoadError naming both models and the first difference if the draft cannot be used."""
    ensure_backend()
    tpath, dpath = check_model_file(target_path), check_model_file(draft_path)
    target = VocabOnly(tpath)
    try:
        draft = VocabOnly(dpath)
        try:
            why = first_difference(target, draft)
        finally:
            draft.close()
    finally:
        target.close()
    if why:
        raise ModelLoadError(f"The draft model {dpath.name} cannot draft for {tpath.name}: {why}.")
