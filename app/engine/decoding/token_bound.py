"""The fewest tokens a text can be, known without tokenizing it.

A prompt that cannot fit the context must be refused in milliseconds. Tokenizing it first costs time that
grows with its length and worse: a 10 MB one-word prompt (one pre-token for a BPE vocabulary) held the engine
8-13 s before its 400, and the next request waited behind it (issue 48). No token spells more bytes than the
vocabulary's longest piece, so a text of N bytes is at least N / longest tokens: past the context, the answer
is known from the byte count alone.

The bound holds where every byte of the text is spelled by some token: byte-level BPE, SentencePiece (SPM,
with byte fallback) and RWKV. Where the tokenizer may drop text before spelling it (WordPiece drops the
spaces between words, Unigram normalizes runs of whitespace, a token that strips the whitespace beside it)
there is no such bound, and fewest() says 0.
"""

from __future__ import annotations

import ctypes
import threading

import llama_cpp

_SPELLS_EVERY_BYTE = (llama_cpp.LLAMA_VOCAB_TYPE_SPM, llama_cpp.LLAMA_VOCAB_TYPE_BPE,
                      llama_cpp.LLAMA_VOCAB_TYPE_RWKV)
_STRIPS = llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP | llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP
_PIECE_CAP = 4096  # bytes read of one piece: a longer one only makes the bound weaker


class TokenBound:
    def __init__(self, vocab):
        self.vocab = vocab
        self._longest: int | None = None  # measured on first need (a walk of the vocabulary, ~0.1 s per 50k)
        self._lock = threading.Lock()

    def fewest(self, text: str | bytes) -> int:
        """A lower bound on the tokens the text is (special-token markup parsed or not); 0 where none is known."""
        size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
        longest = self.longest_piece()
        return -(-size // longest) if longest else 0

    def longest_piece(self) -> int:
        """Bytes of the longest text any one token spells (control tokens' markup included); 0: no bound."""
        with self._lock:
            if self._longest is None:
                self._longest = self._measure()
            return self._longest

    def _measure(self) -> int:
        vocab = self.vocab
        if llama_cpp.llama_vocab_type(vocab) not in _SPELLS_EVERY_BYTE:
            return 0
        buf = ctypes.create_string_buffer(_PIECE_CAP)
        longest = 0
        for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
            if llama_cpp.llama_vocab_get_attr(vocab, token) & _STRIPS:
                return 0
            n = llama_cpp.llama_token_to_piece(vocab, token, buf, _PIECE_CAP, 0, True)
            if n < 0:  # longer than the buffer: it says how long
                n = -n
            longest = max(longest, n)
        return longest
