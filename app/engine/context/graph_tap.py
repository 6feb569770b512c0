"""Read llama.cpp's compute graph while it runs: the `cb_eval` context callback, through ctypes.

llama.cpp's scheduler calls the callback twice per graph node once it is set: first with ask=True ("do you
want this node?"), then, for the nodes answered yes, with ask=False once the node is computed, its result
readable. The importance matrix (app/engine/quantization/imatrix.py) reads the activations going into every weight matrix
this way, as llama-imatrix does; a heavy-hitter KV policy can read the attention scores
(`kq_soft_max-<layer>`) through the same tap.

The ggml_tensor layout is the vendored ggml.h's (llama-cpp-python 0.3.36). It is not part of llama.h's API, so
another llama.cpp could move it: tests/engine/test_graph_tap.py reads known tensors' names and shapes to prove it.
"""

from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path
from typing import Callable

import numpy as np

GGML_MAX_DIMS = 4
GGML_MAX_OP_PARAMS = 64
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64
GGML_TYPE_F32 = 0
GGML_TYPE_I32 = 26
_DTYPES = {GGML_TYPE_F32: np.float32, GGML_TYPE_I32: np.int32}


class GgmlTensor(ctypes.Structure):
    pass


GgmlTensor._fields_ = [
    ("type", ctypes.c_int),
    ("buffer", ctypes.c_void_p),
    ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
    ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
    ("op", ctypes.c_int),
    ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
    ("flags", ctypes.c_int32),
    ("src", ctypes.POINTER(GgmlTensor) * GGML_MAX_SRC),
    ("view_src", ctypes.POINTER(GgmlTensor)),
    ("view_offs", ctypes.c_size_t),
    ("data", ctypes.c_void_p),
    ("name", ctypes.c_char * GGML_MAX_NAME),
    ("extra", ctypes.c_void_p),
    ("padding", ctypes.c_char * 8),
]

TensorP = ctypes.POINTER(GgmlTensor)


class GraphTapError(RuntimeError):
    pass


def _ggml_base() -> ctypes.CDLL:
    """libggml-base from the folder libllama was loaded from (the PyPI wheel's, or LLAMA_CPP_LIB_PATH's)."""
    from llama_cpp import llama_cpp as bindings

    folder = Path(bindings._lib._name).parent
    names = {"win32": ("ggml-base.dll",), "darwin": ("libggml-base.dylib",)}.get(sys.platform, ("libggml-base.so",))
    for name in names:
        if (folder / name).exists():
            return ctypes.CDLL(str(folder / name))
    return ctypes.CDLL(names[0])  # already loaded by libllama: the loader finds it by name


class Ggml:
    """The few ggml functions a tap needs, and the op numbers by name (asked of ggml, not hard-coded)."""

    def __init__(self):
        lib = _ggml_base()
        lib.ggml_op_name.argtypes = [ctypes.c_int]
        lib.ggml_op_name.restype = ctypes.c_char_p
        lib.ggml_backend_buffer_is_host.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_buffer_is_host.restype = ctypes.c_bool
        lib.ggml_backend_tensor_get.argtypes = [TensorP, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        lib.ggml_backend_tensor_get.restype = None
        self.lib = lib
        self.ops: dict[str, int] = {}

    def op(self, name: str) -> int:
        """The number of the graph operation `name` (MUL_MAT): ggml's own table, read from its start up to the
        name, never past it (ggml_op_name does not check its argument, and the table's length is not exported)."""
        if name not in self.ops:
            for code in range(len(self.ops), 128):
                found = (self.lib.ggml_op_name(code) or b"").decode("ascii", "replace")
                if not re.fullmatch(r"[A-Z0-9_]+", found):  # past the table's end: stop before reading further
                    break
                self.ops[found] = code
                if found == name:
                    return code
            raise GraphTapError(f"this llama.cpp has no graph operation {name}")
        return self.ops[name]


_ggml: Ggml | None = None


def ggml() -> Ggml:
    global _ggml
    if _ggml is None:
        _ggml = Ggml()
    return _ggml


def tensor_name(t: GgmlTensor) -> str:
    return t.name.decode("utf-8", "replace")


def weight_name(name: str) -> str:
    """A weight's name as the file has it: the scheduler names copies on other devices 'CUDA0#blk.0.attn_k.weight#0'
    (llama-imatrix's filter_tensor_name)."""
    if "#" in name:
        name = name.split("#", 2)[1]
    return name


def read_array(t: GgmlTensor) -> np.ndarray:
    """An F32 or I32 tensor's data as an array shaped (ne3, ne2, ne1, ne0), copied: from host memory directly,
    from a device buffer through ggml_backend_tensor_get. Rows may be strided (views); elements must not be."""
    dtype = _DTYPES.get(t.type)
    if dtype is None:
        raise GraphTapError(f"{tensor_name(t)} is of ggml type {t.type}, neither F32 nor I32")
    g = ggml()
    ne, nb = list(t.ne), list(t.nb)
    if nb[0] != 4:
        raise GraphTapError(f"{tensor_name(t)} has non-contiguous elements")
    span = 4 + sum((n - 1) * s for n, s in zip(ne, nb))  # ggml_nbytes: first element to past the last
    if t.buffer and g.lib.ggml_backend_buffer_is_host(t.buffer):
        buf = np.frombuffer((ctypes.c_char * span).from_address(t.data), dtype=np.uint8)
    else:
        buf = np.empty(span, dtype=np.uint8)
        g.lib.ggml_backend_tensor_get(ctypes.byref(t), buf.ctypes.data, 0, span)
    view = np.lib.stride_tricks.as_strided(buf.view(dtype), shape=(ne[3], ne[2], ne[1], ne[0]),
                                           strides=(nb[3], nb[2], nb[1], 4), writeable=False)
    return np.array(view)


class EvalTap:
    """A cb_eval callback built from two Python functions.

    wants(tensor) -> bool: called for every node before it is computed (keep it cheap: names and ops only).
    seen(tensor): called for each wanted node once computed.
    An exception in either cannot cross into C: it is kept (`error`), and the tap stops asking for nodes, so the
    caller raises it after llama_decode returns.
    Keep the EvalTap alive as long as the context that holds `callback`.
    """

    def __init__(self, wants: Callable[[GgmlTensor], bool], seen: Callable[[GgmlTensor], None]):
        self.wants, self.seen = wants, seen
        self.error: BaseException | None = None
        from llama_cpp import llama_cpp as bindings

        self.callback = bindings.ggml_backend_sched_eval_callback(self._call)

    def _call(self, pointer: int, ask: bool, _user_data) -> bool:
        if self.error is not None:
            return not ask  # ask: not interested; after a computed node: go on computing
        try:
            t = ctypes.cast(pointer, TensorP).contents
            if ask:
                return bool(self.wants(t))
            self.seen(t)
        except BaseException as exc:  # noqa: BLE001 - kept and raised by the caller, outside C
            self.error = exc
            return not ask
        return True  # False after a computed node would abort the graph

    def raise_error(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
