"""A model and its projector are one library entry: the `mmproj-*.gguf` lying beside a model that sees or hears.

Models that take images or sounds ship as two files: the text model and its projector (llama.cpp's `mmproj`,
GGUF architecture "clip"). A projector is paired with a model in the same folder when its name says `mmproj`,
its header says it is a projector, and the width of the embeddings it makes is the model's embedding width (a
projector of another model would be refused by libmtmd anyway). A projector is never a chat model of its own:
the listing leaves it out, `hearth models show` says what the pair can do ("sees images", "hears audio"), the
load takes it without --mmproj, and removing the model removes its projector.

Headers are read with the bounded reader (app/core/gguf/info.py); a folder's files are looked at by name first,
so a folder of big models costs one header read per projector.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core.errors import ModelFileError
from app.core.gguf.info import read_gguf_info

MARK = "mmproj"


def named_like_projector(path: str | Path) -> bool:
    return MARK in Path(path).name.lower()


@dataclass(frozen=True)
class ProjectorInfo:
    path: Path
    vision: bool
    audio: bool
    width: int | None  # the embeddings' width it makes (the text model's)

    def abilities(self) -> list[str]:
        return [*(["sees images"] if self.vision else []), *(["hears audio"] if self.audio else [])]


def projector_info(path: str | Path) -> ProjectorInfo | None:
    """What a projector file is, from its header; None for a file that is not a projector."""
    try:
        info = read_gguf_info(path)
    except ModelFileError:
        return None
    if info.architecture != "clip":
        return None
    meta = info.metadata
    width = next((v for k in ("clip.vision.projection_dim", "clip.audio.projection_dim")
                  if isinstance(v := meta.get(k), int) and v > 0), None)
    vision = bool(meta.get("clip.has_vision_encoder"))
    audio = bool(meta.get("clip.has_audio_encoder"))
    return ProjectorInfo(Path(path), vision, audio, width)


def is_projector(path: str | Path) -> bool:
    """A file the listing leaves out: named mmproj and a projector by its header."""
    return named_like_projector(path) and projector_info(path) is not None


def chosen_projector(model_path: str | Path, named: str | None) -> tuple[str | None, bool]:
    """(the projector a load opens beside the model, whether it was paired from the model's folder): the one named
    (--mmproj; "none" for none), else the one paired beside the model. The engine's load and its preflight's fit
    both ask here."""
    if named:
        return (None if named.strip().lower() == "none" else named), False
    found = paired_projector(model_path)
    return (str(found.path), True) if found else (None, False)


def paired_projector(model_path: str | Path) -> ProjectorInfo | None:
    """The projector beside a model: same folder, `mmproj` in its name, a projector whose width is the model's.
    Of several, the one whose name shares the most of the model's name (a repo's F16 and Q8_0 projectors: the
    model's own quantization first, then F16)."""
    model = Path(model_path)
    if named_like_projector(model):
        return None
    try:
        width = read_gguf_info(model).embedding_size
        candidates = sorted(p for p in model.parent.glob("*.gguf") if named_like_projector(p) and p != model)
    except (ModelFileError, OSError):
        return None
    found = [info for p in candidates if (info := projector_info(p)) is not None
             and (info.width is None or width is None or info.width == width)]
    if not found:
        return None
    stem = model.stem.lower()

    def likeness(info: ProjectorInfo) -> tuple:
        name = info.path.stem.lower().replace(MARK, "").strip("-_.")
        shared = _shared_tail(name, stem)
        return (shared, "f16" in name, -len(name))

    return max(found, key=likeness)


def _shared_tail(a: str, b: str) -> int:
    """How many characters the two names share at their ends (the quantization: ...-Q4_K_M)."""
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n
