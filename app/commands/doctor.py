"""`hearth doctor`: what this machine and this llama.cpp build can do."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys

from app import __version__
from app.core import machine, paths
from app.core.library.bundled import bundled_model_path
from app.core.errors import HearthError


def register(sub) -> None:
    p = sub.add_parser("doctor", help="show what this machine and llama.cpp build can do")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect() -> dict:
    import llama_cpp

    from app.engine.probes import probe
    from app.engine.speculation import spec_calibration

    try:
        model = str(bundled_model_path())
    except HearthError as exc:
        model = None
        model_error = str(exc)
    report = {
        "hearth": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": machine.cpu(),
        "ram_total_mb": machine.ram_total_mb(),
        "ram_available_mb": machine.ram_available_mb(),
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "mmap": bool(llama_cpp.llama_supports_mmap()),
        "mlock": bool(llama_cpp.llama_supports_mlock()),
        "llama_system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(" |"),
        "versions": {d: _version(d) for d in ("llama-cpp-python", "gguf", "huggingface-hub", "PySide6-Essentials",
                                               "pyqtgraph", "psutil", "platformdirs")},
        "bundled_model": model,
        "paths": paths.all_paths(),
    }
    if model is None:
        report["bundled_model_error"] = model_error
        report["extra_bufts"] = probe.cached_result()
    else:
        report["extra_bufts"] = probe.extra_bufts_decision(model)
    report["spec_calibration"] = spec_calibration.kept()
    report["documents"] = _documents()
    from app.commands.runtimes import collect as collect_runtimes

    # Each runtime loaded in a child of its own, with its devices and their memory (about a second each).
    report["runtimes"] = collect_runtimes()
    # Offload is a runtime's, not this process's: the binding here is the CPU build even where a CUDA or Vulkan
    # runtime beside it sees a GPU (the H200 said "no" here while its cuda runtime held all layers).
    report["gpus"] = gpus_seen(report["runtimes"])
    report["gpu_offload"] = report["gpu_offload"] or bool(report["gpus"])
    return report


def gpus_seen(runtimes: list[dict]) -> list[dict]:
    """Every real GPU a usable runtime's probe saw: its name, memory and the runtime that reaches it."""
    seen = []
    for entry in runtimes:
        probe = entry.get("probe") or {}
        if not entry.get("compatible") or not probe.get("ok"):
            continue
        for device in probe.get("devices") or []:
            if device.get("gpu") and not device.get("software"):
                seen.append({"name": device.get("description") or device.get("name"),
                             "memory_total_mb": device.get("memory_total_mb"), "runtime": entry.get("name")})
    return seen


def _documents() -> dict:
    """The documents' index (its size on disk, nothing opened or made) and the embedding model it would use."""
    from app.docs import embed_model

    index = paths.docs_index()
    size = sum(p.stat().st_size for p in (index, index.with_name(index.name + "-wal")) if p.exists())
    try:
        model = embed_model.find()
        note = None if model else embed_model.BM25_ONLY
    except HearthError as exc:
        model, note = None, str(exc)
    return {"index": str(index), "index_bytes": size, "embedding_model": str(model) if model else None,
            "embedding_note": note}


def run(args: argparse.Namespace) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    cpu = report["cpu"]
    extra = report["extra_bufts"] or {}
    lines = [
        f"Hearth {report['hearth']} on Python {report['python']} ({report['platform']})",
        f"CPU:        {cpu['name']} ({cpu['arch']}), {cpu['physical_cores']} physical / {cpu['logical_cores']} logical cores",
        f"Features:   {', '.join(cpu['features']) or 'none detected'}",
        f"RAM:        {report['ram_total_mb']} MB total, {report['ram_available_mb']} MB available",
        "GPU offload: " + ("; ".join(f"yes: {g['name']}, {g['memory_total_mb'] or 0:,} MB (the {g['runtime']} runtime)"
                                     for g in report["gpus"]) or ("yes" if report["gpu_offload"] else
                                     "no (no runtime here sees a GPU; see the runtimes below)")),
        f"Extra buffer types (AMX/repack): {'on' if extra.get('ok') else 'off'} - {extra.get('detail', 'not probed')}",
        f"llama.cpp:  {report['llama_system_info']}",
        "Versions:   " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v),
        f"Bundled model: {report['bundled_model'] or report.get('bundled_model_error')}",
    ]
    from app.engine.speculation.spec_calibration import describe

    kept = report["spec_calibration"]
    lines.append("Speculation calibration: " + ("" if kept else "none yet (measured the first time a model drafts; "
                                                                 "hearth bench spec --recalibrate renews it)"))
    lines += [f"  {describe(entry)}" for entry in kept]
    from app.commands.runtimes import describe as describe_runtime

    lines.append("Runtimes:" + ("" if any(r["backend"] != "CPU" for r in report["runtimes"]) else
                                " cpu only (`hearth runtimes build vulkan` builds a GPU runtime)"))
    for entry in report["runtimes"]:
        lines += [f"  {line}" for line in describe_runtime(entry)]
    lines += [f"{k.capitalize() + ':':11} {v}" for k, v in report["paths"].items()]
    from app.core.units import human_size

    docs = report["documents"]
    lines.append(f"Documents:  index {human_size(docs['index_bytes'])}; embedding model "
                 f"{docs['embedding_model'] or docs['embedding_note']}")
    print("\n".join(lines))
    return 0
