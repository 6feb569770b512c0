"""The attention each KV cell of one sequence has received, read from llama.cpp's graph while it decodes.

The heavy-hitter context policy (app/engine/context/h2o.py) evicts the cells that got the least attention. llama.cpp does
not report attention, but with flash attention off every layer's attention probabilities are a graph tensor,
`kq_soft_max-<layer>` of shape [n_kv, n_tokens, n_head, n_stream], and the `cb_eval` callback can read it once
computed (app/engine/context/graph_tap.py has the tensor layout).

Two things are read per decode:
- the probabilities of every `stride`-th layer, summed over heads and query rows into one score per cell
  (H2O's accumulated attention), and how many query rows could see each cell, so the policy can average (MEAN);
- where llama.cpp put the new tokens: the soft_max's mask (its src[1], [n_kv, n_tokens]) is finite exactly where
  a query row may look, so the cell a row sees first among the cells that were empty is that row's own.
  llama.cpp has no public call for cell positions, and after a removal it reuses freed cells, so cell order is
  not position order; reading the placement from the mask is what llama.cpp really did, not a guess.

The callback is asked about every graph node (about 1,100 per decode on a 30-layer model) under the GIL, so the
question is answered from the node's op number alone for all but the soft_max nodes, without building a ctypes
structure. Removals and shifts of positions are mirrored from the Runtime's memory operations (`removed`,
`shifted`, `cleared`), so the map stays the cache's own.

One sequence only: with parallel slots the streams of a batch share one tensor in an order this code would have
to reconstruct, so the policy is refused there (app/engine/context/h2o.py says so).
"""

from __future__ import annotations

import ctypes

import numpy as np

from app.engine.context.graph_tap import GGML_TYPE_F32, GgmlTensor, TensorP, ggml, tensor_name

# Every 3rd layer: on the bundled 30-layer model its eviction choices gave the same perplexity as all 30 layers
# (12.32 at a 25% budget) at a third of the reads; every 6th or 10th gave 14.0 (docs/window_benchmark.md).
LAYER_STRIDE = 3
NAME_PREFIX = b"kq_soft_max-"
# Attention averaged over the queries that could see a cell, not summed as H2O's paper sums it: summed, the oldest
# tokens win by having been seen longest (perplexity 13.9 vs 12.3 at a 25% budget, docs/window_benchmark.md).
MEAN = True

_OP_OFFSET = GgmlTensor.op.offset
_NAME_OFFSET = GgmlTensor.name.offset


def _floats(t: GgmlTensor, count: int, host_buffers: dict[int, bool]) -> np.ndarray:
    """The first `count` floats of a tensor: a view of host memory, or a copy from a device buffer (a GPU layer's
    attention is in device memory, where reading its address from the CPU would crash). host_buffers: what is
    known of this context's buffers (a freed buffer's address may come back as another context's)."""
    buffer = t.buffer
    host = host_buffers.get(buffer) if buffer else True
    if host is None:
        host = host_buffers[buffer] = bool(ggml().lib.ggml_backend_buffer_is_host(buffer))
    if host:
        return np.frombuffer((ctypes.c_float * count).from_address(t.data), dtype=np.float32)
    out = np.empty(count, dtype=np.float32)
    ggml().lib.ggml_backend_tensor_get(ctypes.byref(t), out.ctypes.data, 0, count * 4)
    return out


class AttentionScores:
    """Accumulated attention and position per KV cell of sequence 0; `callback` goes into cb_eval.

    cell_pos[c]: the position the cell holds, -1 for an empty cell. score[c]: the attention it received since
    it was filled. `broken` is set (with the reason) when what llama.cpp did cannot be matched to the map; the
    policy then evicts by position alone rather than by wrong scores.
    """

    def __init__(self, n_cells: int, stride: int = LAYER_STRIDE, n_layer: int = 1024):
        self.stride = max(1, int(stride))
        self._wanted: set[bytes] = set()
        self.for_layers(n_layer)
        self._first = NAME_PREFIX + b"0"  # the first sampled layer of a decode reads the placement
        self.cell_pos = np.full(n_cells, -1, dtype=np.int64)
        self.score = np.zeros(n_cells, dtype=np.float64)
        self.seen_by = np.zeros(n_cells, dtype=np.float64)  # query rows that could attend to the cell
        self.broken: str | None = None
        self.notice: str | None = None  # what the user is told at load (flash attention turned off)
        self.error: BaseException | None = None
        self._host_buffers: dict[int, bool] = {}  # backend buffer -> host memory or not, asked once each
        self.reads = 0  # tensors read: a test checks that only the sampled layers are
        from llama_cpp import llama_cpp as bindings

        self.callback = bindings.ggml_backend_sched_eval_callback(self._make_call())

    def for_layers(self, n_layer: int) -> None:
        """The model's layer count, once loaded (the Runtime tells): which layers are read."""
        self.layers = tuple(range(0, n_layer, self.stride))
        self._wanted.clear()  # in place: the callback holds this very set
        self._wanted.update(NAME_PREFIX + str(layer).encode() for layer in self.layers)

    # --- the callback: keep the ask path short, it runs for every node ---------------------
    def _make_call(self):
        """The cb_eval function. Asked about every node, it reads the node's op number through one reusable
        pointer (setting its address and reading through it costs half of building a ctypes int per node) and
        looks at the name of soft_max nodes only; everything it needs is a local of the closure."""
        soft_max = ggml().op("SOFT_MAX")
        holder = ctypes.c_void_p()
        op_at = ctypes.cast(ctypes.pointer(holder), ctypes.POINTER(ctypes.POINTER(ctypes.c_int))).contents
        string_at = ctypes.string_at
        wanted = self._wanted
        seen = self._seen

        def call(pointer: int, ask: bool, _user_data) -> bool:
            if ask:
                holder.value = pointer + _OP_OFFSET
                if op_at[0] != soft_max:
                    return False
                return self.error is None and string_at(pointer + _NAME_OFFSET) in wanted
            try:
                seen(pointer)
            except BaseException as exc:  # noqa: BLE001 - cannot cross into C; the policy raises it after the decode
                self.error = exc
            return True  # False would abort the graph

        return call

    def _seen(self, pointer: int) -> None:
        t = ctypes.cast(pointer, TensorP).contents
        n_kv, n_rows, n_head, n_stream = t.ne
        if t.type != GGML_TYPE_F32 or n_stream != 1 or t.nb[0] != 4:
            self.broken = self.broken or f"{tensor_name(t)} is not one F32 stream ({n_kv}x{n_rows}x{n_head}x{n_stream})"
            return
        if n_kv > len(self.cell_pos):
            self._grow(n_kv)
        if ctypes.string_at(pointer + _NAME_OFFSET) == self._first:
            self._place(t, n_kv, n_rows)
        # soft_max writes a fresh contiguous result, so the rows are one block: a view, summed, never copied.
        probs = _floats(t, n_head * n_rows * n_kv, self._host_buffers)
        # One token's few rows sum exactly enough in float32; a prompt's hundreds of rows are summed in float64.
        self.score[:n_kv] += probs.reshape(n_head * n_rows, n_kv).sum(axis=0, dtype=np.float64 if n_rows > 1 else None)
        self.reads += 1

    def _place(self, t: GgmlTensor, n_kv: int, n_rows: int) -> None:
        """Give this ubatch's rows their cells: row r's cell is the empty one it is the first to see."""
        mask_t = t.src[1]
        if not mask_t:
            self.broken = self.broken or "the attention has no mask to place tokens by"
            return
        m = mask_t.contents
        if m.type != GGML_TYPE_F32 or m.nb[0] != 4:
            self.broken = self.broken or "the attention mask is not F32"
            return
        row_stride = int(m.nb[1]) // 4
        flat = _floats(m, (n_rows - 1) * row_stride + n_kv, self._host_buffers)
        empty = self.cell_pos[:n_kv] < 0
        if n_rows == 1:  # generation: one token, one new cell (the common case, kept short)
            row = np.isfinite(flat[:n_kv])
            self.seen_by[:n_kv] += row
            cell = np.flatnonzero(row & empty)
            if len(cell) != 1:
                self.broken = self.broken or f"a one-token decode filled {len(cell)} empty cells"
                return
            self.cell_pos[cell] = self.cell_pos.max() + 1
            self.score[cell] = 0.0
            self.seen_by[cell] = 1.0
            return
        mask = np.lib.stride_tricks.as_strided(flat, shape=(n_rows, n_kv), strides=(row_stride * 4, 4))
        self.seen_by[:n_kv] += np.isfinite(mask).sum(axis=0)
        visible = np.isfinite(mask[:, empty])  # rows x the empty cells
        seen = visible.any(axis=0)
        new_cells = np.flatnonzero(empty)[seen]
        first_row = visible[:, seen].argmax(axis=0)
        order = np.argsort(first_row, kind="stable")
        if len(new_cells) != n_rows or not np.array_equal(first_row[order], np.arange(n_rows)):
            self.broken = self.broken or (f"a decode of {n_rows} tokens filled {len(new_cells)} empty cells in an "
                                          "order the map cannot follow")
            return
        base = int(self.cell_pos.max()) + 1  # the decoder appends: the next position follows every kept one
        cells = new_cells[order]
        self.cell_pos[cells] = base + np.arange(n_rows)
        self.score[cells] = 0.0
        self.seen_by[cells] = np.isfinite(mask[:, cells]).sum(axis=0)

    def _grow(self, n: int) -> None:
        self.cell_pos = np.concatenate([self.cell_pos, np.full(n - len(self.cell_pos), -1, dtype=np.int64)])
        self.score = np.concatenate([self.score, np.zeros(n - len(self.score))])
        self.seen_by = np.concatenate([self.seen_by, np.zeros(n - len(self.seen_by))])

    def raise_error(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    # --- the Runtime's memory operations, mirrored ----------------------------------------
    @staticmethod
    def _range(p0: int, p1: int) -> tuple[int, int]:
        return (max(p0, 0), p1 if p1 >= 0 else np.iinfo(np.int64).max)

    def removed(self, p0: int, p1: int) -> None:
        lo, hi = self._range(p0, p1)
        self._free((self.cell_pos >= lo) & (self.cell_pos < hi))

    def shifted(self, p0: int, p1: int, delta: int) -> None:
        lo, hi = self._range(p0, p1)
        moved = (self.cell_pos >= lo) & (self.cell_pos < hi)
        self.cell_pos[moved] += delta
        self._free(moved & (self.cell_pos < 0))  # llama.cpp frees a cell shifted below position 0

    def cleared(self) -> None:
        self._free(slice(None))
        self.broken = None  # an empty cache is known exactly again

    def _free(self, cells) -> None:
        """Cells (a mask or a slice) that hold nothing any more: no position, no attention."""
        self.cell_pos[cells] = -1
        self.score[cells] = 0.0
        self.seen_by[cells] = 0.0

    # --- what the policy asks -------------------------------------------------------------
    def by_position(self, n: int, mean: bool = MEAN) -> np.ndarray:
        """The scores of positions 0..n-1: attention summed (H2O's), or with mean, averaged over the query rows
        that could see the cell, so that an old token's long run of queries does not outweigh a newer one."""
        out = np.zeros(n)
        held = (self.cell_pos >= 0) & (self.cell_pos < n)
        score = self.score[held]
        if mean:
            score = score / np.maximum(self.seen_by[held], 1.0)
        out[self.cell_pos[held]] = score
        return out

    def positions_in_cell_order(self) -> list[int]:
        return [int(p) for p in self.cell_pos if p >= 0]
