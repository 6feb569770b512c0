"""A prompt with images or sounds: its text tokens and libmtmd's media chunks, in order, as one list of ids.

The rendered prompt holds libmtmd's marker where each medium stands. The text between markers is tokenized as
every prompt is (Runtime.tokenize: one BOS, the user's own text kept literal); each medium goes through
`mtmd_tokenize` alone, which gives what the model family writes around it (Gemma 3's <start_of_image>, Qwen's
<|vision_start|>) and the medium's chunk. Tokenizing the pieces apart gives the tokens one `mtmd_tokenize` of
the whole text gives: libmtmd splits at the markers and tokenizes each piece apart too.

The decoder keeps one id per KV position (`Decoder.tokens`), so a medium is spelled there as placeholders: one
negative id per position it takes, drawn from its content's hash. So the prompt cache works unchanged: a
second question about the same image shares the whole image with the cached conversation and it is not encoded
again; another image differs at its first position, and everything from there is evaluated anew. A medium is
reused or evaluated whole, never from its middle (`whole_keep`).

With M-RoPE (Qwen2-VL) an image takes fewer positions than KV cells (a 5x5 grid of 25 embeddings advances the
position by 5); `cells` counts the cells, which is what must fit the context.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

import llama_cpp
from llama_cpp import mtmd_cpp as mtmd

from app.core.errors import ContextTooLong, GenerationError
from app.protocol import step_clock
from app.protocol.media import Media, MediaError

PLACEHOLDER_SPAN = 2_000_000_000


@dataclass
class Piece:
    start: int  # first position
    ids: list[int]  # text tokens, or one placeholder per position of a medium
    chunk: object = None  # libmtmd's chunk of a medium (None: text)
    cells: int = 0  # KV cells it takes
    medium: Media | None = None

    @property
    def end(self) -> int:
        return self.start + len(self.ids)


class MediaPrompt:
    """A prompt's text and media as pieces; evaluate() from any piece boundary, close() when evaluated."""

    def __init__(self, projector, rt, text: str, media: list[Media], literal=(), tokenize=None):
        """tokenize(text, literal spans, add_special) -> ids: the decoder's own text tokenizer."""
        self.projector = projector
        self.rt = rt
        self.media = media
        self.pieces: list[Piece] = []
        self._owned: list = []  # libmtmd's chunk lists, freed by close()
        marker = projector.marker
        segments = text.split(marker)
        if len(segments) - 1 != len(media):
            raise MediaError(f"The prompt has {len(segments) - 1} media markers for {len(media)} images and sounds; "
                             "the chat template may have dropped or repeated a message.")
        at = 0
        try:
            for i, segment in enumerate(segments):
                spans = [(max(s, at) - at, min(e, at + len(segment)) - at) for s, e in literal
                         if s < at + len(segment) and e > at]
                ids = tokenize(segment, spans, i == 0) if segment or i == 0 else []
                self._text(ids)
                at += len(segment) + len(marker)
                if i < len(media):
                    self._medium(media[i])
        except BaseException:
            self.close()
            raise
        if self.pieces and self.pieces[-1].chunk is not None:
            self.close()
            raise MediaError("The prompt ends with an image or a sound, and the model needs text after it to "
                             "answer; the chat template may not suit media.")
        self.tokens = [tok for piece in self.pieces for tok in piece.ids]
        self.cells = sum(piece.cells for piece in self.pieces)
        self.encoded = 0  # media encoded by evaluate(): 0 when the cache held them all
        self.encode_s = 0.0

    # --- building ------------------------------------------------------------------------------------------------
    def _text(self, ids: list[int]) -> None:
        if not ids:
            return
        if self.pieces and self.pieces[-1].chunk is None:
            self.pieces[-1].ids += ids
            self.pieces[-1].cells += len(ids)
        else:
            self.pieces.append(Piece(self._next(), list(ids), cells=len(ids)))

    def _next(self) -> int:
        return self.pieces[-1].end if self.pieces else 0

    def _medium(self, medium: Media) -> None:
        ctx = self.projector.ctx
        bitmap = self.projector.bitmap(medium)
        chunks = mtmd.mtmd_input_chunks_init()
        self._owned.append(chunks)
        try:
            marker = self.projector.marker.encode("utf-8")
            text = mtmd.mtmd_input_text(marker, len(marker), False, True)
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1)
        finally:
            mtmd.mtmd_bitmap_free(bitmap)
        if rc != 0:
            raise MediaError(f"libmtmd could not prepare {medium.describe()} for this model (code {rc}).")
        seed = int(medium.digest[:12], 16)
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                self._text(list(ptr[: n.value]))
                continue
            n_pos = int(mtmd.mtmd_input_chunk_get_n_pos(chunk))
            base = (seed + 7919 * i) % PLACEHOLDER_SPAN
            ids = [-1 - (base + j) % PLACEHOLDER_SPAN for j in range(n_pos)]
            self.pieces.append(Piece(self._next(), ids, chunk=chunk,
                                     cells=int(mtmd.mtmd_input_chunk_get_n_tokens(chunk)), medium=medium))

    # --- the decoder's view --------------------------------------------------------------------------------------
    def check_fits(self, n_ctx: int) -> None:
        """ContextTooLong, before anything is evaluated, for a prompt whose cells cannot fit with a token to spare."""
        if self.cells < n_ctx:
            return
        media_cells = sum(p.cells for p in self.pieces if p.chunk is not None)
        n = len(self.media)
        what = f"{n} image{'s' if n != 1 else ''}" if all(m.kind == "image" for m in self.media) else \
            f"{n} medi{'a' if n != 1 else 'um'}"
        raise ContextTooLong(f"This conversation with {what} is {self.cells:,} tokens ({media_cells:,} of them "
                             f"for the {what}), more than the model's context of {n_ctx:,}; load the model with "
                             "a larger context (--ctx), or send fewer or smaller images.")

    def whole_keep(self, keep: int) -> int:
        """A cached prefix of `keep` positions, moved back to the start of a medium it would cut."""
        for piece in self.pieces:
            if piece.chunk is not None and piece.start < keep < piece.end:
                return piece.start
        return keep

    def evaluate(self, decoder, cancelled=None, progress=None) -> int:
        """Evaluate every position past what `decoder.tokens` holds (a piece boundary); logits on the last (a
        text token: the generation prompt). Returns the KV cells evaluated."""
        done = 0
        for piece in self.pieces:  # every medium of the prompt, reused ones too: the decoder counts their cells
            if piece.chunk is not None and piece.cells != len(piece.ids):
                decoder.media_extra[piece.ids[0]] = piece.cells - len(piece.ids)
        decoder.recount_hidden()
        for piece in self.pieces:
            have = len(decoder.tokens)
            if piece.end <= have:
                continue
            if cancelled is not None and cancelled.is_set():
                break
            if piece.chunk is None:
                done += decoder.eval_tokens(piece.ids[have - piece.start:], cancelled)
            else:
                if have != piece.start:  # whole_keep made sure of it
                    raise GenerationError("Internal engine error: a medium would be evaluated from its middle.")
                step_clock.mark(piece.cells)  # the encode and its decode are one step for the watchdog
                started = time.perf_counter()
                new_past = llama_cpp.llama_pos(have)
                rc = mtmd.mtmd_helper_eval_chunk_single(self.projector.ctx, self.rt.ctx, piece.chunk, have,
                                                        decoder.seq, self.rt.n_batch, False,
                                                        ctypes.byref(new_past))
                if rc != 0:
                    raise GenerationError(f"libmtmd could not evaluate {piece.medium.describe()} (code {rc}); "
                                          "the context may be full.")
                decoder.tokens.extend(piece.ids)
                decoder.recount_hidden()
                decoder.total_evaluated += piece.cells
                done += piece.cells
                self.encoded += 1
                self.encode_s += time.perf_counter() - started
            if progress is not None:
                progress(done)
        return done

    def figures(self) -> dict:
        """What the answer's Done event says of its media; its prompt counted in KV cells (an M-RoPE image takes
        more cells than positions), as llama-server counts a prompt's tokens."""
        return {"prompt_tokens": self.cells, "media": len(self.media), "media_tokens": sum(p.cells for p in self.pieces if p.medium is not None),
                "media_encoded": self.encoded, "media_s": round(self.encode_s, 4)}

    def close(self) -> None:
        for chunks in self._owned:
            mtmd.mtmd_input_chunks_free(chunks)
        self._owned = []
        for piece in self.pieces:
            piece.chunk = None
