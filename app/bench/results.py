"""Saved `hearth bench matrix` results: where they are kept, and reading one back (compare, the Benchmark tab)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from app.core import paths
from app.core.errors import HearthError

KIND = "hearth-bench-matrix"  # the "kind" of a result file, so another JSON file is not taken for one


def save_result(result: dict) -> Path:
    """Keep a result under the data folder's bench/; records where in result["saved_to"]."""
    folder = paths.data_dir() / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"matrix-{time.strftime('%Y%m%d-%H%M%S')}.json"
    result["saved_to"] = str(target)
    target.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return target


def write_json(result: dict, path: str | Path) -> None:
    try:
        Path(path).write_text(json.dumps(result, indent=2), encoding="utf-8")
    except OSError as exc:
        raise HearthError(f"Could not write {path}: {exc.strerror or exc}.") from None


def load_result(path: str | Path) -> dict:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HearthError(f"There is no file {p}.") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HearthError(f"{p.name} is not a readable benchmark result ({exc}).") from None
    if not isinstance(data, dict) or data.get("kind") != KIND or not isinstance(data.get("rows"), list):
        raise HearthError(f"{p.name} is not a result of `hearth bench matrix`.")
    return data


def machine_label(m: dict) -> str:
    """One line naming the machine, for table captions."""
    ram = m.get("ram_total_mb", 0) / 1024
    return (f"{m.get('cpu', '?')}, {m.get('physical_cores', '?')} cores, {ram:.0f} GiB RAM, "
            f"GPU: {m.get('gpu', '?')}, llama-cpp-python {m.get('llama_cpp_python', '?')}")
