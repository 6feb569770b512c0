"""Importance matrix files in llama-imatrix's GGUF format, so that llama.cpp's own tools read Hearth's and Hearth
reads theirs.

The format (vendored tools/imatrix/imatrix.cpp, common/imatrix-loader.cpp): general.type = "imatrix", the keys
imatrix.datasets (strings), imatrix.chunk_count and imatrix.chunk_size (u32), and per weight matrix two F32
tensors: `<name>.in_sum2`, the sum over tokens of each input column's squared activation (one row per expert
for a mixture-of-experts weight), and `<name>.counts`, how many tokens each row summed. llama-quantize divides
one by the other (tools/quantize/quantize.cpp, load_imatrix); `importance` does the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.core.errors import HearthError

SUMS, COUNTS = ".in_sum2", ".counts"
# Hearth's own addition, which llama.cpp ignores: the model file the matrix was computed on, for the sentence
# that says a matrix belongs to another model.
MODEL_KEY = "hearth.imatrix.model"
# What llama-quantize writes into a quant made with a matrix (tools/quantize/quantize.cpp).
QUANT_FILE_KEY = "quantize.imatrix.file"
QUANT_DATASET_KEY = "quantize.imatrix.dataset"
QUANT_ENTRIES_KEY = "quantize.imatrix.entries_count"
QUANT_CHUNKS_KEY = "quantize.imatrix.chunks_count"


class ImatrixError(HearthError):
    pass


@dataclass
class Entry:
    sums: np.ndarray  # (n_mat, n_cols) float32
    counts: np.ndarray  # (n_mat,) float32

    def importance(self) -> np.ndarray:
        """What llama.cpp's quantizer takes for this weight: the mean squared activation per column (per expert),
        1 where a row saw no token (an expert the text never reached)."""
        counts = self.counts.reshape(-1, 1).astype(np.float32)
        out = np.ones_like(self.sums, dtype=np.float32)
        seen = counts[:, 0] > 0
        out[seen] = self.sums[seen] / counts[seen]
        return np.ascontiguousarray(out.reshape(-1), dtype=np.float32)


@dataclass
class Imatrix:
    entries: dict[str, Entry] = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0
    model: str | None = None  # the model file's name (Hearth's files only)
    path: str | None = None

    def describe(self) -> str:
        where = f" of {self.model}" if self.model else ""
        texts = ", ".join(Path(d).name if ("/" in d or "\\" in d) else d for d in self.datasets) or "unnamed text"
        return (f"{len(self.entries)} weight matrices{where}, from {self.chunk_count} chunks of {self.chunk_size} "
                f"tokens of {texts}")


def write_imatrix(path: str | Path, imatrix: Imatrix) -> None:
    import gguf

    path = Path(path)
    writer = gguf.GGUFWriter(str(path), arch="imatrix")
    writer.kv_data[0].pop(gguf.Keys.General.ARCHITECTURE, None)  # llama-imatrix writes none: a matrix is no model
    writer.add_string(gguf.Keys.General.TYPE, "imatrix")
    writer.add_array("imatrix.datasets", list(imatrix.datasets) or [""])
    writer.add_uint32("imatrix.chunk_count", int(imatrix.chunk_count))
    writer.add_uint32("imatrix.chunk_size", int(imatrix.chunk_size))
    if imatrix.model:
        writer.add_string(MODEL_KEY, imatrix.model)
    for name in sorted(imatrix.entries):  # llama-imatrix's order, so two runs on one text give one file
        entry = imatrix.entries[name]
        writer.add_tensor(name + SUMS, np.ascontiguousarray(entry.sums, dtype=np.float32))
        writer.add_tensor(name + COUNTS, np.ascontiguousarray(entry.counts.reshape(-1, 1), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def read_imatrix(path: str | Path) -> Imatrix:
    """A matrix file, or ImatrixError with one sentence (missing, not GGUF, not a matrix, sums without counts)."""
    import gguf

    file = Path(path).expanduser()
    if not file.is_file():
        raise ImatrixError(f"{file} does not exist.")
    try:
        with open(file, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ImatrixError(f"{file} cannot be read ({exc.strerror or exc}).") from None
    if magic != b"GGUF":
        raise ImatrixError(f"{file.name} is not an importance matrix in GGUF format (llama-imatrix's older .dat "
                           "files are not read; make one with `hearth models imatrix`).")
    # A model file (one Hearth's header reader accepts: it names an architecture) is refused from its header:
    # gguf.GGUFReader would spend seconds turning its vocabulary into numpy objects. A matrix names none.
    from app.core.gguf.info import read_gguf_info

    try:
        kind = read_gguf_info(file).metadata.get(gguf.Keys.General.TYPE) or "model"
    except HearthError:
        kind = None
    if kind is not None and kind != "imatrix":
        raise ImatrixError(f"{file.name} is not an importance matrix: it is a GGUF {kind} file "
                           "(pass the .gguf that `hearth models imatrix` or llama-imatrix wrote).")
    try:
        reader = gguf.GGUFReader(str(file))
    except (ValueError, OSError, IndexError) as exc:
        raise ImatrixError(f"{file.name} is not a readable GGUF file ({exc}).") from None

    def value(key: str):
        f = reader.get_field(key)
        return None if f is None else f.contents()

    if value(gguf.Keys.General.TYPE) != "imatrix":  # a GGUF that is neither a model nor a matrix
        raise ImatrixError(f"{file.name} is not an importance matrix (its general.type is not 'imatrix').")
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        data = np.asarray(t.data, dtype=np.float32)
        if t.name.endswith(SUMS):
            sums[t.name[:-len(SUMS)]] = data.reshape(-1, int(t.shape[0])) if t.shape.size else data.reshape(1, -1)
        elif t.name.endswith(COUNTS):
            counts[t.name[:-len(COUNTS)]] = data.reshape(-1)
    if not sums:
        raise ImatrixError(f"{file.name} holds no importance matrix entries.")
    unpaired = sorted(set(sums) ^ set(counts))
    if unpaired:
        raise ImatrixError(f"{file.name} is damaged: {unpaired[0]} has sums without counts or counts without sums.")
    entries = {}
    for name, s in sums.items():
        c = counts[name]
        if s.size % max(c.size, 1):
            raise ImatrixError(f"{file.name} is damaged: {name}'s sums do not split into its {c.size} counts.")
        entries[name] = Entry(s.reshape(c.size, -1), c)
    datasets = value("imatrix.datasets") or []
    return Imatrix(entries=entries, datasets=[str(d) for d in datasets],
                   chunk_count=int(value("imatrix.chunk_count") or 0), chunk_size=int(value("imatrix.chunk_size") or 0),
                   model=value(MODEL_KEY), path=str(file))


def mismatch(imatrix: Imatrix, model_name: str, tensors) -> str | None:
    """The sentence that says a matrix was computed on another model (its weight names or widths are not this
    model's), or None. tensors: the model's gguf_info TensorInfo list (shape ne0, ne1, ...)."""
    by_name = {t.name: t for t in tensors}
    where = f" (it was computed on {imatrix.model})" if imatrix.model and imatrix.model != model_name else ""
    unknown = [n for n in imatrix.entries if n not in by_name]
    if unknown:
        return (f"The importance matrix was computed on another model{where}: {len(unknown)} of its "
                f"{len(imatrix.entries)} entries name no weight of {model_name} (such as {sorted(unknown)[0]}). "
                f"Compute one on {model_name} with `hearth models imatrix`.")
    for name, entry in sorted(imatrix.entries.items()):
        shape = by_name[name].shape
        width = int(shape[0]) * (int(shape[2]) if len(shape) > 2 else 1)  # llama-quant.cpp: ne[0] * ne[2]
        if entry.sums.size != width:
            return (f"The importance matrix was computed on another model{where}: its {name} has {entry.sums.size:,} "
                    f"columns, {model_name}'s has {width:,}. Compute one on {model_name} with `hearth models imatrix`.")
    covered = [t for t in tensors if t.name.startswith("blk.") and t.name.endswith(".weight") and len(t.shape) >= 2]
    if covered and not any(t.name in imatrix.entries for t in covered):
        return f"The importance matrix has none of {model_name}'s weight matrices; compute one on it."
    return None
