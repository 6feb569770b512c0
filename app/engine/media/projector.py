"""A model's projector (`mmproj-*.gguf`): libmtmd's context beside the loaded text model.

A projector turns an image or a sound into embeddings the text model reads. Opening one must never cost the
model or the engine: a file that is not a projector, a projector of another model (another embedding width),
a damaged file, or one this libmtmd aborts on (a Voxtral projector dies in its warm-up, "expected output 187
tokens, got 188") is one sentence, and the text model stays loaded and answers text.

So a projector is checked in three steps: its GGUF header here (a projector's architecture is "clip", and its
projection width must be the model's embedding width); then, once per pair of files, a throwaway child process
(app/engine/media/projector_check.py) opens it as the engine would, warm-up included, where an abort costs that
child only; then the engine opens it. The child's answer is remembered per pair of files and llama.cpp build.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import llama_cpp

try:
    from llama_cpp import mtmd_cpp as mtmd
except (OSError, RuntimeError):
    # An engine runtime built without libmtmd (one made before Hearth built it in, or by hand): the engine loads
    # and answers text; a projector is refused in one sentence (Projector below), never a failed import.
    mtmd = None

from app.core import paths
from app.core.errors import HearthError, ModelFileError
from app.core.gguf.info import read_gguf_info
from app.core.proc import child_command, child_env, exit_reason, last_event
from app.core.making.runtimes import MTMD_LIB_ENV
from app.core.store.jsonstore import is_object, read_json, update_json
from app.engine.process import llamalog
from app.protocol.media import Media, MediaError

CHECK_TIMEOUT_S = 120
REMEMBERED = 64  # pairs of files whose check is kept


class ProjectorError(HearthError):
    """A projector that cannot be used with this model: said in one sentence, the text model stays."""


def projection_width(meta: dict) -> int | None:
    """The embedding width a projector's output has (what the text model must read), from its header."""
    for key in ("clip.vision.projection_dim", "clip.audio.projection_dim"):
        value = meta.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_header(path: Path, model_width: int, model_name: str) -> dict:
    """The projector's header, or ProjectorError: not a projector, or one for a model of another width."""
    try:
        info = read_gguf_info(path)
    except ModelFileError as exc:
        raise ProjectorError(f"The projector cannot be used: {exc}") from None
    if info.architecture != "clip":
        raise ProjectorError(f"{path.name} is not a projector (its architecture is '{info.architecture}', a "
                             "projector's is 'clip'): pair the model with its mmproj file.")
    width = projection_width(info.metadata)
    if width is not None and width != model_width:
        raise ProjectorError(f"{path.name} is the projector of another model: it makes embeddings {width} wide and "
                             f"{model_name} reads {model_width}; use the mmproj file made for {model_name}.")
    return info.metadata


class Projector:
    """libmtmd's context for one loaded model; close() before the model is freed."""

    def __init__(self, rt, path: str | Path):
        self.path = Path(path).expanduser()
        name = rt.path.name
        width = llama_cpp.llama_model_n_embd_inp(rt.model)
        if not self.path.is_file():
            raise ProjectorError(f"The projector {self.path} does not exist.")
        if mtmd is None:
            folder = os.environ.get(MTMD_LIB_ENV) or "the binding's folder"
            raise ProjectorError(f"the engine runtime in {folder} was built without libmtmd, so {name} answers text "
                                 "only; rebuild that runtime (`hearth runtimes build vulkan` or `cuda`) or run on "
                                 "the cpu runtime to send images and sounds.")
        check_header(self.path, width, name)
        checked = checked_in_child(rt.path, self.path)
        if not checked.get("ok"):
            raise ProjectorError(checked.get("detail") or f"{self.path.name} cannot be used with {name}.")
        llamalog.install_mtmd()
        llamalog.clear()
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = int(rt.options.n_gpu_layers) != 0
        params.n_threads = rt.n_threads
        params.print_timings = False
        params.warmup = True
        # The text model's own setting: libmtmd's default (auto) is what llama.cpp chose for the model too.
        params.flash_attn_type = {"on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                                  "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}.get(
            rt.options.flash_attn, llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO)
        started = time.perf_counter()
        self.ctx = mtmd.mtmd_init_from_file(str(self.path).encode(), rt.model, params)
        if not self.ctx:
            raise ProjectorError(explain(self.path, name))
        self.load_s = time.perf_counter() - started
        self.vision = bool(mtmd.mtmd_support_vision(self.ctx))
        self.audio = bool(mtmd.mtmd_support_audio(self.ctx))
        self.mrope = bool(mtmd.mtmd_decode_use_mrope(self.ctx))
        self.marker = mtmd.mtmd_default_marker().decode("utf-8")
        self.size_bytes = self.path.stat().st_size

    def describe(self) -> dict:
        return {"mmproj": self.path.name, "mmproj_path": str(self.path), "vision": self.vision, "audio": self.audio,
                "mmproj_bytes": self.size_bytes, "mmproj_load_s": round(self.load_s, 3)}

    def refuse_unsupported(self, media: list[Media], model_name: str) -> None:
        for medium in media:
            if medium.kind == "image" and not self.vision:
                raise MediaError(f"{model_name} hears but does not see: its projector {self.path.name} takes "
                                 f"sounds, not images.")
            if medium.kind == "audio" and not self.audio:
                raise MediaError(f"{model_name} sees but does not hear: its projector {self.path.name} takes "
                                 f"images, not sounds.")

    def bitmap(self, medium: Media):
        """libmtmd's bitmap of a checked medium (decoded pixels or samples); the caller frees it."""
        buf = (ctypes.c_uint8 * len(medium.data)).from_buffer_copy(medium.data)
        llamalog.clear()
        handle = mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(medium.data), False)
        if not handle:
            detail = _last_error(llamalog.recent_lines())
            raise MediaError(f"libmtmd could not decode {medium.describe()}{': ' + detail if detail else ''}.")
        # The bitmap's id keys libmtmd's own caches; ours is the content hash.
        mtmd.mtmd_bitmap_set_id(handle, medium.digest[:32].encode())
        return handle

    def close(self) -> None:
        if getattr(self, "ctx", None):
            mtmd.mtmd_free(self.ctx)
            self.ctx = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


def explain(path: Path, model_name: str) -> str:
    detail = _last_error(llamalog.recent_lines())
    return (f"libmtmd could not open the projector {path.name} for {model_name}"
            f"{': ' + detail if detail else ''}; the model answers text only.")


def _last_error(lines: list[str]) -> str:
    errors = [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    if not errors:
        return ""
    text = errors[-1]
    for prefix in ("mtmd_init_from_file: error: ", "clip_init: ", "error: "):
        text = text.split(prefix, 1)[-1]
    return text.strip().rstrip(".")[:300]


# --- the check in a child process, remembered ------------------------------------------------------------------
def _pair_key(model: Path, mmproj: Path) -> str:
    parts = [llama_cpp.__version__]
    for path in (model, mmproj):
        stat = path.stat()
        parts += [str(path.resolve()), str(stat.st_size), str(stat.st_mtime_ns)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def _checks_file() -> Path | None:
    try:
        return paths.cache_dir() / "projector-checks.json"
    except OSError:
        return None


def checked_in_child(model: Path, mmproj: Path, command: list[str] | None = None) -> dict:
    """{"ok": bool, "detail": sentence}: whether libmtmd opens this projector for this model without dying, asked
    of a child process the first time, remembered after. command: a test's seam (a child that aborts)."""
    key = _pair_key(model, mmproj)
    where = _checks_file()
    known = read_json(where, {}, valid=is_object).get(key) if where is not None else None
    if isinstance(known, dict) and "ok" in known and command is None:
        return known
    cmd = command or child_command("app.engine.media.projector_check", str(model), str(mmproj))
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=CHECK_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"ok": False, "detail": f"Checking the projector {mmproj.name} took more than {CHECK_TIMEOUT_S} s; "
                                       "the model answers text only."}
    event = last_event(proc.stdout, "projector")
    answer = {"ok": bool(event.get("ok")), "detail": str(event.get("detail") or "")} if event is not None else None
    if answer is None or proc.returncode != 0:
        tail = [line.strip() for line in proc.stderr.splitlines() if line.strip()][-1:]
        answer = {"ok": False, "detail": f"libmtmd crashed opening the projector {mmproj.name} "
                                         f"({exit_reason(proc.returncode)}{': ' + tail[0][:200] if tail else ''}); "
                                         "this llama.cpp cannot use it, and the model answers text only."}
    answer["check_s"] = round(time.perf_counter() - started, 2)
    if where is not None and command is None:
        def remember(data: dict) -> dict:
            kept = dict(list(data.items())[-(REMEMBERED - 1):])
            kept[key] = answer
            return kept

        try:
            update_json(where, remember, {}, valid=is_object)
        except OSError as exc:
            print(f"hearth: could not remember the projector check in {where}: {exc}", file=sys.stderr)
    return answer
