"""libmtmd driven as llama.cpp's `llama-mtmd-cli` drives it: the whole prompt tokenized at once with its media
(`mtmd_tokenize`, BOS added by the vocabulary), evaluated with `mtmd_helper_eval_chunks`, then greedy argmax
token by token until an end-of-generation token. The reference Hearth's own decode loop must match."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np
from llama_cpp import mtmd_cpp as mtmd


def reference_ids(model_path, mmproj_path, prompt: str, media: list[bytes], n: int, n_ctx: int,
                  threads: int) -> list[int]:
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.use_extra_bufts = False  # as the tests load Hearth's runtime
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mp)
    assert model
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, 512, 512
    cp.n_threads = cp.n_threads_batch = threads
    ctx = llama_cpp.llama_init_from_model(model, cp)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.print_timings = False, threads, False
    mctx = mtmd.mtmd_init_from_file(str(mmproj_path).encode(), model, params)
    assert mctx
    bitmaps, chunks, batch = [], None, None
    try:
        for data in media:
            buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
            bitmaps.append(mtmd.mtmd_helper_bitmap_init_from_buf(mctx, buf, len(data), False))
            assert bitmaps[-1]
        text = prompt.encode()
        inp = mtmd.mtmd_input_text(text, len(text), True, True)
        chunks = mtmd.mtmd_input_chunks_init()
        array = (mtmd.mtmd_bitmap_p_ctypes * max(len(bitmaps), 1))(*bitmaps)
        assert mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(inp), array, len(bitmaps)) == 0
        n_past = llama_cpp.llama_pos(0)
        assert mtmd.mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 512, True, ctypes.byref(n_past)) == 0
        vocab = llama_cpp.llama_model_get_vocab(model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        batch = llama_cpp.llama_batch_init(1, 0, 1)
        out, pos = [], n_past.value
        for _ in range(n):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            token = int(np.argmax(logits))
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                break
            out.append(token)
            batch.n_tokens = 1
            batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = token, pos, 1, 1
            batch.seq_id[0][0] = 0
            assert llama_cpp.llama_decode(ctx, batch) == 0
            pos += 1
        return out
    finally:
        if batch is not None:
            llama_cpp.llama_batch_free(batch)
        if chunks is not None:
            mtmd.mtmd_input_chunks_free(chunks)
        for bitmap in bitmaps:
            mtmd.mtmd_bitmap_free(bitmap)
        mtmd.mtmd_free(mctx)
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
