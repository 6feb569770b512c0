"""What the Models page asks of the headless model manager (app.core library, hub, fit, quantize, convert).

These functions block (disk, network, child processes); the page calls them
through app.ui.bridge.worker.Tasks. They return plain dicts shaped for the page's
tables, and let HearthError sentences through for the message bridge.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from app.core.gguf import quant_types as qt
def _entry_row(entry: dict) -> dict:
    """A library entry as the table shows it; `quantization` is the library's field for the GGUF type."""
    row = dict(entry)
    row["quant"] = entry.get("quantization") or "?"
    row.setdefault("name", Path(entry.get("path", "")).stem)
    return row


def list_models(extra_paths: list[str] = (), keep: list[str] = ()) -> list[dict]:
    """[{name, path, size_bytes, quant, source, ...}]: the library, plus imported paths it does not know.

    A file that went away stays as a row with "missing": True (#49.8): a recorded import, an imported path, and
    the paths in `keep` (the loaded model: it still runs from memory, and the window still names it)."""
    from app.core import library

    rows = [_entry_row(e.to_dict()) for e in library.list_models()]
    known = {r["path"] for r in rows}
    for path in extra_paths:
        if path not in known and Path(path).is_file():
            try:
                rows.append(_entry_row(library.resolve(path, discover_others=False).to_dict()))
                known.add(path)
            except Exception:  # noqa: BLE001 - an unreadable leftover import is skipped, not fatal
                continue
    gone = [*library.missing_records(), *((p, "imported") for p in extra_paths), *((p, "loaded") for p in keep)]
    for path, source in gone:
        if path and path not in known and not Path(path).exists():
            known.add(path)
            rows.append(missing_row(path, source))
    return rows


def missing_row(path: str, source: str) -> dict:
    return {"name": Path(path).name, "path": path, "size_bytes": 0, "quant": "?", "source": source, "owned": False,
            "id": Path(path).stem, "missing": True}


def forget_missing(path: str) -> None:
    """A row whose file is gone, out of the library (its record; the file is not there to delete)."""
    from app.core import library

    library.forget_missing(path)


def relocate(old: str, new: str) -> dict:
    """The file of a missing row found at `new`: imported (linked) there, and the old record forgotten."""
    from app.core import library

    entry = _entry_row(library.import_model(new, mode="link").to_dict())
    if not Path(old).exists():
        library.forget_missing(old)
    return entry


def inspect(path: str) -> dict:
    from app.core.gguf.info import read_gguf_info

    return read_gguf_info(path).to_dict()


def fit(path: str, n_ctx: int, kv_type: str, runtime: str = "auto", draft: str | None = None) -> dict:
    """The memory-fit verdict (FitEstimate as a dict: verdict, fits, gpu_layers, n_layers, ...) on the runtime
    the load settings chose: its device's free memory as the runtime's probe read it (any vendor's Vulkan device,
    not only what nvidia-smi sees), named in the verdict; the cpu runtime has none."""
    from app.backends.runtime_choice import fit_on

    return fit_on(path, n_ctx, kv_type, runtime, draft).to_dict()


def draft_pay(target: str, draft: str) -> dict:
    """Whether draft can pay as target's draft model (app/core/draft_pay.DraftVerdict as a dict)."""
    from dataclasses import asdict

    from app.core.library.draft_pay import draft_verdict

    return asdict(draft_verdict(target, draft))


def runtime_choices() -> list[dict]:
    """The Runtime box's entries (app/ui/runtime_text.choice_row): auto with what it picks now, cpu, and each GPU
    runtime installed here with its device and free memory. Only runtimes that exist are offered. Choosing
    probes a runtime in a child process the first time on a machine (about a second); the answer is kept in
    the machine facts, so later starts read it in milliseconds."""
    from app.backends import runtime_choice
    from app.core.making import runtimes
    from app.ui.models.runtime_text import choice_row

    installed = [n for n in runtimes.NAMES if n != "cpu" and runtimes.find_runtime(n) is not None]
    chosen = {asked: runtime_choice.choose(asked).describe() for asked in ("auto", "cpu", *installed)}
    offloading = [n for n in installed if chosen[n]["name"] != "cpu" and chosen[n]["devices"]]
    return [choice_row(asked, choice, installed, offloading) for asked, choice in chosen.items()]


def draft_candidates(target: str, rows: list[dict]) -> list[dict]:
    """The library's models that can draft for target: smaller, and with the same vocabulary by llama.cpp's
    own rule (only vocabularies are read: milliseconds each, in the vocabulary child: llama.cpp never runs in
    the window's process)."""
    from app.backends.vocab import draft_refusal

    size = next((r.get("size_bytes") or 0 for r in rows if r.get("path") == target), 0)
    return [row for row in rows if row.get("path") != target and not row.get("error") and size
            and (row.get("size_bytes") or 0) < size and draft_refusal(target, row.get("path")) is None]


def import_model(path: str) -> dict:
    """Add a GGUF file to the library (linked, not copied)."""
    from app.core import library

    return _entry_row(library.import_model(path, mode="link").to_dict())


def plan_removal(path: str):
    """What deleting it will do (library.Removal: the files and sizes, or only forgetting a link)."""
    from app.core import library

    return library.plan_removal(path)


def remove_model(removal) -> None:
    """Carry out exactly the removal the user was shown."""
    from app.core import library

    library.carry_out(removal)


# --- Hugging Face ------------------------------------------------------------------

def recommended() -> list[dict]:
    """The curated list, as result rows: {repo_id, filename, quant, size, title, note, draft}."""
    from app.core.library.hub import recommended_models

    return [{"repo_id": m["repo"], "filename": m.get("file"), "quant": m.get("quant"),
             "size": int(m["size_gb"] * 1e9) if m.get("size_gb") else None,
             "title": m.get("name") or m["repo"], "note": m.get("good_at", ""),
             "draft": (m.get("draft") or {}).get("name"), "params": m.get("params")} for m in recommended_models()]


def search(query: str) -> list[dict]:
    """Repositories with their GGUF files: [{repo_id, downloads, likes, gated, files: [{filename, size, quant}]}]."""
    from app.core.library import hub
    return [{"repo_id": repo.repo_id, "downloads": repo.downloads, "likes": repo.likes, "gated": repo.gated,
             "files": [{"filename": f.filename, "size": f.size, "quant": f.quant, "parts": f.split_count or 1}
                       for f in repo.files if (f.split_index or 1) == 1]}  # a split set downloads as one
            for repo in hub.search(query, limit=30)]


def pull(repo_id: str, filename: str | None, progress: Callable[[int, int], None],
         cancel: threading.Event) -> str:
    """Download a model into the models folder (where the library finds it); returns the path to load."""
    from app.core.library import hub
    return str(hub.pull(repo_id, filename, progress=progress, cancel=cancel).paths[0])


# --- making new files ---------------------------------------------------------------

def quant_types() -> list[tuple[str, str]]:
    """[(GGUF type, label)] for the quantize menu: 'Q4_K_M (INT4)'."""
    return [(q, qt.label(q)) for q in qt.QUANTIZE_TYPES]


# The core's sentence ends with the command line's way on; the window's is its button.
_WINDOW_WAY_ON = "; Quantize anyway still makes the copy"


def requantize_note(path: str, info: dict, qtype: str) -> str:
    """What quantizing this file (inspect's dict) to qtype costs when it is already quantized; '' when it is not."""
    from app.core.making.quantize import requantize_problem

    problem = requantize_problem(Path(path).name, info.get("file_type"), qtype, info.get("file_size") or 0,
                                 info.get("parameters") or 0, way_on=_WINDOW_WAY_ON)
    return problem or ""


def quantize(path: str, qtype: str, progress: Callable[[int, int], None], cancel: threading.Event) -> str:
    from app.core.making.quantize import quantize as run

    # The pane said what requantizing costs before the user pressed Quantize anyway (requantize_note).
    return run(path, qtype, progress=progress, cancel=cancel, allow_requantize=True).path


def measure_quality(path: str, text: str, progress: Callable[..., None], cancel: threading.Event) -> str:
    """`hearth bench quality --model PATH --text TEXT` in a child process (llama.cpp never runs in the window),
    its figures kept for the quantize pane (app/bench/quality_store.py); returns the model path. The bundled
    model is measured from its F16 copy."""
    from app.bench.jobs import JobCancelled, run_job
    from app.core.errors import HearthError

    try:
        run_job("app.bench.quality:measure_and_keep", {"model": path, "text": text},
                lambda fraction, what: progress(fraction, 1.0, what), cancel)
    except JobCancelled:
        raise HearthError("Measuring was cancelled.") from None
    return path


def converter_note() -> str:
    """'' when conversion can run, else the sentence that says what to install."""
    from app.core.making.convert import INSTALL_HINT, converter_installed

    return "" if converter_installed() else INSTALL_HINT + "."


def convert(source: str, outtype: str, quantize_to: str | None, progress: Callable[[str, float, float], None],
            cancel: threading.Event) -> str:
    from app.core.making.convert import convert as run

    return str(run(source, outtype=outtype, quantize=quantize_to, progress=progress, cancel=cancel))


def seed_name(qtype: str | None) -> str:
    return qt.SEED_NAMES.get(qtype or "", "")
