"""An importance matrix from the user's text: llama-imatrix's sums, collected through llama.cpp's eval callback.

What it sums is llama-imatrix's (vendored tools/imatrix/imatrix.cpp, collect_imatrix), so llama.cpp's
quantizer weighs Hearth's matrix as it weighs its own:
- for every MUL_MAT whose weight is a `blk.*` tensor and whose input has at least 16 rows of F32 (the small
  batches of generation are skipped), and for every MUL_MAT_ID (mixture of experts);
- the sum over tokens of each input column's squared activation, per weight (per expert), and the number of
  tokens summed;
- over the text cut into chunks of ctx tokens, each evaluated from an empty KV cache in one batch with its
  first token replaced by BOS where the model uses one, logits on every row (so the last layer runs on all).

It runs in a child process (app/engine/quantization/imatrix_worker.py) that the caller can kill to cancel;
`make_imatrix` (app/backends/imatrix.py) is the parent's side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from app.core.gguf.imatrix import Entry, Imatrix, ImatrixError

MIN_ROWS = 16  # llama-imatrix ignores smaller batches


class Collector:
    """The sums, fed by an EvalTap (app/engine/context/graph_tap.py)."""

    def __init__(self):
        from app.engine.context.graph_tap import ggml

        g = ggml()
        self.mul_mat, self.mul_mat_id = g.op("MUL_MAT"), g.op("MUL_MAT_ID")
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, np.ndarray] = {}

    def wants(self, t) -> bool:
        from app.engine.context.graph_tap import GGML_TYPE_F32, tensor_name, weight_name

        if t.op == self.mul_mat_id:
            return True
        if t.op != self.mul_mat:
            return False
        src1 = t.src[1].contents
        if src1.ne[1] < MIN_ROWS or src1.type != GGML_TYPE_F32:
            return False
        return weight_name(tensor_name(t.src[0].contents)).startswith("blk.")

    def seen(self, t) -> None:
        from app.engine.context.graph_tap import read_array, tensor_name, weight_name

        src0, src1 = t.src[0].contents, t.src[1].contents
        name = weight_name(tensor_name(src0))
        x = read_array(src1).astype(np.float64)  # (ne3, ne2, ne1, ne0)
        if t.op == self.mul_mat_id:
            self._experts(name, src0, x, read_array(t.src[2].contents))
        else:
            self._dense(name, src0, x)
        if not np.isfinite(self.sums[name]).all():
            raise ImatrixError(f"The activations into {name} are not finite numbers: the model or its file is "
                               "broken, and no matrix can be made from it.")

    def _dense(self, name: str, src0, x: np.ndarray) -> None:
        n2, n3 = int(src0.ne[2]), int(src0.ne[3])
        sums = self.sums.setdefault(name, np.zeros((n2 * n3, x.shape[3])))
        counts = self.counts.setdefault(name, np.zeros(1, dtype=np.int64))  # one count per dense weight
        squared = np.square(x).sum(axis=2)  # over rows (tokens): (ne3, ne2, ne0)
        for i3 in range(x.shape[0]):
            for i2 in range(x.shape[1]):  # a 2-D weight takes every slice of a 3-D input
                sums[(i3 % n3) * n2 + (i2 % n2)] += squared[i3, i2]
        counts += (x.shape[0] * x.shape[1] * x.shape[2]) // (n2 * n3)

    def _experts(self, name: str, src0, x: np.ndarray, ids: np.ndarray) -> None:
        # src1 -> [cols, n_expert_used or 1, n_tokens]; ids -> [n_expert_used, n_tokens], the experts each
        # token was routed to (llama-imatrix's MUL_MAT_ID branch)
        n_as = int(src0.ne[2])
        x, ids = x[0], ids[0, 0]  # (n_tokens, ne1, ne0), (n_tokens, n_ids)
        sums = self.sums.setdefault(name, np.zeros((n_as, x.shape[2])))
        counts = self.counts.setdefault(name, np.zeros(n_as, dtype=np.int64))
        for idx in range(ids.shape[1]):
            experts = ids[:, idx].astype(np.int64)
            if experts.min() < 0 or experts.max() >= n_as:
                raise ImatrixError(f"llama.cpp routed a token of {name} to an expert it does not have.")
            np.add.at(sums, experts, np.square(x[:, idx % x.shape[1], :]))
            counts += np.bincount(experts, minlength=n_as)

    def matrix(self, ctx: int, chunks: int, datasets: list[str], model: str) -> Imatrix:
        entries = {n: Entry(self.sums[n].astype(np.float32), self.counts[n].astype(np.float32)) for n in self.sums}
        return Imatrix(entries=entries, datasets=datasets, chunk_count=chunks, chunk_size=ctx, model=model)


def document_tokens(rt, docs: list[dict]) -> list[int]:
    """The documents as one token stream: texts joined as one file is (llama-imatrix tokenizes its file once,
    with BOS), chats rendered with the model's own template (their turn markers are special tokens)."""
    texts = [d["text"] for d in docs if "text" in d]
    tokens = rt.tokenize("\n\n".join(texts), add_special=rt.add_bos(), parse_special=False) if texts else []
    chats = [d for d in docs if "messages" in d]
    if chats:
        from app.engine.prompt.template import TemplateRenderError, template_for

        _fmt, template = template_for(rt)
        for chat in chats:
            try:
                text = template.render(chat["messages"], add_generation_prompt=False)
                special = True
            except TemplateRenderError:  # roles this template refuses: the words still calibrate
                text, special = "\n\n".join(m["content"] for m in chat["messages"]), False
            tokens += rt.tokenize(text, add_special=False, parse_special=special)
    return tokens


def compute(model_path: str, docs: list[dict], datasets: list[str], ctx: int, threads: int | None = None,
            on_chunk: Callable[[int, int], None] | None = None) -> Imatrix:
    """The matrix of model_path over the documents, in this process."""
    import llama_cpp

    from app.core.metrics import default_threads
    from app.engine.decoding.decode import Decoder
    from app.engine.context.graph_tap import EvalTap
    from app.protocol.messages import LoadOptions
    from app.engine.decoding.runtime import Runtime

    if ctx < MIN_ROWS:
        raise ImatrixError(f"The context for calibration must be at least {MIN_ROWS} tokens (--ctx).")
    collector = Collector()
    tap = EvalTap(collector.wants, collector.seen)
    # Extra buffer types off: they crash quantized models on some CPUs (DESIGN.md), and speed is not the point.
    rt = Runtime(LoadOptions(model_path=model_path, n_ctx=ctx, n_batch=ctx, n_threads=threads or default_threads()),
                 extra_bufts=False, eval_tap=tap)
    try:
        tokens = document_tokens(rt, docs)
        n = len(tokens) // ctx
        if n == 0:
            raise ImatrixError(f"The text has {len(tokens):,} tokens; an importance matrix needs at least one chunk "
                               f"of --ctx {ctx} tokens. Give more text or a smaller --ctx.")
        bos = llama_cpp.llama_vocab_bos(rt.vocab) if rt.add_bos() else None
        decoder = Decoder(rt)
        try:
            for i in range(n):
                chunk = list(tokens[i * ctx:(i + 1) * ctx])
                if bos is not None:
                    chunk[0] = bos
                decoder.reset()
                decoder.verify(chunk)
                tap.raise_error()
                if on_chunk:
                    on_chunk(i + 1, n)
        finally:
            decoder.close()
        if not collector.sums:
            raise ImatrixError(f"llama.cpp ran no weight matrix of {Path(model_path).name} on the text; it has "
                               "nothing to weigh.")
        return collector.matrix(ctx, n, datasets, Path(model_path).name)
    finally:
        rt.close()
