"""`hearth bench matrix`: what each technique buys on this machine, with this model.

Rows (the reference article's ladder, reproduced locally):
  1. F16 baseline            2. Q8_0 ("INT8")            3. Q4_K_M ("INT4")
  4. Q4_K_M + speculative decoding (the best drafter for each workload)
  5. combined: Q4_K_M + speculative + q8_0 KV cache + flash attention (+ all layers on the GPU
     when this llama.cpp build can offload; otherwise shown as "n/a (CPU-only build)").
Rows 1-4 use an f16 KV cache with flash attention off, so row 5 shows what those two add.

Measured per row, in a fresh child process per row (so its peak RSS is its own), through the
same Session and Decoder the engine runs:
- pp512: 512 random tokens in one batch from an empty KV cache (llama-bench's pp512);
- per workload (free-form chat; code editing, where drafts are often accepted): prompt tok/s
  (the workload's prompt from an empty KV cache, llama-bench's pp definition), generation
  tok/s (tokens generated / time from the end of the prompt to the last token, tg's
  definition), time to first token (tokenize + prompt + first sample), draft acceptance;
- peak RSS of the child (resident memory high-water mark, weights mapped and touched);
- model file size, and the share of the memory-bandwidth bound: bytes of weights read per
  token x generation tok/s / the read bandwidth measured here (app/bench/bandwidth.py).
  Speculation verifies several tokens per pass over the weights, so it can exceed 100%.
Every figure is a median over --repeats runs, with min-max spread. The runs are rounds: each
round runs every configuration once, in a fresh process, after a warm-up pass that is not
counted (as llama-bench does: it touches the mapped weights), so that other work on the
machine hits all rows alike (--no-interleave: all repeats of a row in one process). The KV cache is
emptied before every run; the file itself may be in the OS page cache, as it is for
llama-bench. A row that fails is kept, marked failed, with the reason.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from app.core import paths
from app.core.errors import HearthError
from app.core.metrics import peak_rss_mb

Progress = Callable[[float, str], None]

ROWS = [
    {"id": "f16", "label": "F16 baseline", "qtype": "F16"},
    {"id": "q8_0", "label": "Q8_0 (INT8)", "qtype": "Q8_0"},
    {"id": "q4_k_m", "label": "Q4_K_M (INT4)", "qtype": "Q4_K_M"},
    {"id": "q4_k_m_spec", "label": "Q4_K_M + speculative", "qtype": "Q4_K_M", "spec": True},
    {"id": "combined", "label": "combined", "qtype": "Q4_K_M", "spec": True, "kv_type": "q8_0",
     "flash_attn": "on", "gpu": True},
]
BASELINE = "f16"

CODE = '''def summarize_orders(orders, tax_rate=0.2):
    """Group orders by customer and compute totals with tax."""
    totals = {}
    for order in orders:
        customer = order["customer"]
        amount = order["quantity"] * order["unit_price"]
        if order.get("discount"):
            amount -= amount * order["discount"]
        totals.setdefault(customer, 0.0)
        totals[customer] += amount
    report = []
    for customer, subtotal in sorted(totals.items()):
        tax = subtotal * tax_rate
        report.append({
            "customer": customer,
            "subtotal": round(subtotal, 2),
            "tax": round(tax, 2),
            "total": round(subtotal + tax, 2),
        })
    grand = sum(item["total"] for item in report)
    return report, round(grand, 2)
'''

WORKLOADS = {
    "chat": {
        "label": "free-form chat",
        "messages": [{"role": "user", "content": "Tell me about the history of tea and how it spread around the "
                      "world. Write several paragraphs."}],
        "max_tokens": 128,
    },
    "code": {
        "label": "code editing",
        "messages": [{"role": "user", "content": "Rewrite this Python function with the variable `totals` renamed "
                      "to `by_customer`. Change nothing else and reply with the code only.\n\n```python\n"
                      + CODE + "```"}],
        "max_tokens": 320,
    },
}
QUICK_TOKENS = {"chat": 24, "code": 48}
PP_TOKENS = 512
N_CTX = 2048


class MatrixCancelled(HearthError):
    """The user stopped the benchmark."""


# --- model variants ------------------------------------------------------------------
def prepare_variant(source: Path, qtype: str, progress: Progress | None = None,
                    cancel: threading.Event | None = None) -> dict:
    """The source model in `qtype`: the source itself, a file quantized earlier, or a new one."""
    from app.core.gguf_info import read_gguf_info
    from app.core.quantize import default_output, quantize

    if (read_gguf_info(source).file_type or "").upper() == qtype:
        return {"path": str(source), "cached": True, "quantized_from": None}
    target = default_output(source, qtype)
    if target.exists():
        try:
            if (read_gguf_info(target).file_type or "").upper() == qtype and \
                    target.stat().st_mtime >= source.stat().st_mtime:
                return {"path": str(target), "cached": True, "quantized_from": str(source)}
        except HearthError:
            pass  # unreadable leftover: quantize again over it

    def on_bytes(done: int, total: int) -> None:
        if progress:
            progress(done / max(total, 1), f"quantizing to {qtype}")

    result = quantize(source, qtype, out=target, progress=on_bytes, cancel=cancel)
    return {"path": result.path, "cached": False, "quantized_from": str(source), "seconds": result.seconds}


def bytes_read_per_token(info) -> int:
    """Generation reads every weight once per token, except the input embedding, of which it reads one row;
    with tied embeddings (no output.weight) that same matrix is the output layer and is read whole."""
    names = {t.name: t for t in info.tensors}
    embd = names.get("token_embd.weight")
    if embd is None or "output.weight" not in names:
        return info.weights_bytes
    rows = embd.shape[-1] if embd.shape else 1
    return info.weights_bytes - embd.n_bytes + embd.n_bytes // max(rows, 1)


# --- one configuration, in a child process -------------------------------------------
def _worker(cfg: dict, out_fd: int) -> dict:
    """Runs in the child: load, warm up, measure; returns raw runs (the parent takes medians)."""
    import llama_cpp  # noqa: F401 - loaded before timing anything

    from app.bench.basic import _emitter, measure_pp
    from app.core.bundled import bundled_model_path
    from app.core.metrics import rss_mb
    from app.engine.protocol import LoadOptions, SamplingOptions
    from app.engine.session import Session

    def note(message: str) -> None:
        os.write(out_fd, (json.dumps({"ev": "progress", "message": message}) + "\n").encode())

    try:
        probe_model = str(bundled_model_path())
    except HearthError:
        probe_model = cfg["model"]
    options = LoadOptions(model_path=cfg["model"], n_ctx=N_CTX, n_batch=PP_TOKENS, n_threads=cfg["threads"],
                          n_gpu_layers=cfg["gpu_layers"], kv_type=cfg["kv_type"], flash_attn=cfg["flash_attn"],
                          lookup=cfg.get("drafter") == "lookup",
                          draft_model=cfg.get("draft_model") if cfg.get("drafter") == "draft-model" else None)
    rss_start = rss_mb()
    started = time.perf_counter()
    session = Session.load(options, probe_model=probe_model)
    load_s = time.perf_counter() - started
    rss_loaded = rss_mb()
    emit, fd = _emitter()
    rng = random.Random(1234)
    result = {"load_s": load_s, "rss_start_mb": rss_start, "rss_loaded_mb": rss_loaded,
              "extra_bufts": session.rt.extra_bufts, "pp512": [], "workloads": {}}
    try:
        note("warm-up")
        if not cfg.get("quick"):
            measure_pp(session.decoder, rng)
        for name, w in cfg["workloads"].items():
            session.reset()
            session.chat(w["messages"], SamplingOptions(max_tokens=8, temperature=0.0, repeat_penalty=1.0),
                         emit, threading.Event())
            result["workloads"][name] = []
        for rep in range(cfg["repeats"]):
            note(f"run {rep + 1}/{cfg['repeats']}: pp512")
            result["pp512"].append(measure_pp(session.decoder, rng))
            for name, w in cfg["workloads"].items():
                note(f"run {rep + 1}/{cfg['repeats']}: {name}")
                session.reset()
                sampling = SamplingOptions(max_tokens=w["max_tokens"], temperature=0.0, repeat_penalty=1.0)
                done = session.chat(w["messages"], sampling, emit, threading.Event())
                run = {k: done[k] for k in ("prompt_tokens", "prompt_tok_s", "completion_tokens", "gen_tok_s",
                                            "ttft_s", "finish_reason")}
                if done.get("spec"):
                    run["spec"] = done["spec"]
                result["workloads"][name].append(run)
        # When layers are offloaded: the GPUs' memory in use with the model loaded (device-wide, as
        # nvidia-smi shows it; app/engine/gpu_memory.py). None on a CPU-only build.
        result["gpu_mb"] = session.rt.memory_now().get("gpu_mb")
    finally:
        os.close(fd)
        session.close()
    result["peak_rss_mb"] = peak_rss_mb()  # VmHWM: this child's own peak
    return result


def _exit_with_parent() -> None:
    """A benchmark whose parent died (a killed CLI, a crashed GUI) must not go on using the machine for minutes."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def worker_main() -> int:
    """`python -m app.bench.matrix --worker`: config JSON on stdin, JSON lines out, the last one the result."""
    from app.core.errors import HearthError as _HearthError

    _exit_with_parent()
    out_fd = os.dup(1)
    os.dup2(2, 1)  # whatever llama.cpp prints must not corrupt the result channel
    sys.stdout = sys.stderr
    cfg = json.loads(sys.stdin.read())
    try:
        result = {"ev": "result", **_worker(cfg, out_fd)}
    except _HearthError as exc:
        result = {"ev": "error", "message": str(exc)}
    os.write(out_fd, (json.dumps(result) + "\n").encode())
    return 0


def run_child(cfg: dict, timeout_s: float, cancel: threading.Event | None = None,
              on_note: Callable[[str], None] | None = None) -> dict:
    """One configuration in a fresh process: {"ok": True, ...runs} or {"ok": False, "reason": sentence}."""
    from app.engine.client import _exit_reason
    from app.engine.spawn import ENTRY_FLAGS, child_command, child_env, is_frozen

    if is_frozen() and "app.bench.matrix" not in ENTRY_FLAGS:
        return {"ok": False, "reason": "this build of Hearth cannot start the benchmark's measuring process"}
    log = paths.log_dir() / f"bench-matrix-{cfg['row']}-{cfg.get('drafter') or 'plain'}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(child_command("app.bench.matrix", "--worker"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, env=child_env())
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for raw in proc.stdout:
            lines.put(raw)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    proc.stdin.write(json.dumps(cfg).encode())
    proc.stdin.close()
    deadline = time.monotonic() + timeout_s
    final = None
    try:
        while True:
            if cancel is not None and cancel.is_set():
                raise MatrixCancelled("The benchmark was cancelled.")
            if time.monotonic() > deadline:
                return {"ok": False, "reason": f"it took longer than {timeout_s:.0f} s and was stopped"}
            try:
                raw = lines.get(timeout=0.1)
            except queue.Empty:
                continue
            if raw is None:
                break
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if event.get("ev") == "progress":
                if on_note:
                    on_note(event["message"])
            else:
                final = event
    finally:
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        proc.stdout.close()
    if final is None:
        return {"ok": False, "reason": f"its process stopped unexpectedly: {_exit_reason(code)}; its log is at {log}"}
    if final["ev"] == "error":
        return {"ok": False, "reason": final["message"]}
    return {"ok": True, **{k: v for k, v in final.items() if k != "ev"}}


# --- the matrix ------------------------------------------------------------------------
def _stat(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def _summarize_workload(runs: list[dict], bytes_per_token: int, bandwidth_gb_s: float) -> dict:
    gen = _stat([r["gen_tok_s"] for r in runs])
    out = {
        "prompt_tokens": runs[0]["prompt_tokens"],
        "completion_tokens": statistics.median(r["completion_tokens"] for r in runs),
        "prompt_tok_s": _stat([r["prompt_tok_s"] for r in runs]),
        "gen_tok_s": gen,
        "ttft_s": _stat([r["ttft_s"] for r in runs]),
        "bandwidth_share": gen["median"] * bytes_per_token / (bandwidth_gb_s * 1e9) if bandwidth_gb_s else None,
    }
    specs = [r["spec"] for r in runs if r.get("spec")]
    if specs:
        drafted = sum(s["drafted"] for s in specs)
        out["spec"] = {
            "drafter": specs[0]["drafter"],
            "acceptance": sum(s["accepted"] for s in specs) / drafted if drafted else 0.0,
            "drafted": drafted,
            "tokens_per_step": statistics.median(s["tokens_per_step"] for s in specs),
            "k": [s["k"] for s in specs],
        }
    return out


def _pct(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return 100.0 * (value - base) / base


def _add_deltas(rows: list[dict], workloads: list[str]) -> None:
    base = next((r for r in rows if r["id"] == BASELINE and r["status"] == "ok"), None)
    for row in rows:
        if row["status"] != "ok" or base is None:
            continue
        row["vs_baseline"] = {
            "pp512_pct": _pct(row["pp512"]["median"], base["pp512"]["median"]),
            "peak_rss_pct": _pct(row["peak_rss_mb"], base["peak_rss_mb"]),
            "file_size_pct": _pct(row["file_size_bytes"], base["file_size_bytes"]),
        }
        for w in workloads:
            mine, theirs = row["workloads"][w], base["workloads"][w]
            mine["gen_vs_baseline_pct"] = _pct(mine["gen_tok_s"]["median"], theirs["gen_tok_s"]["median"])
            mine["prompt_vs_baseline_pct"] = _pct(mine["prompt_tok_s"]["median"], theirs["prompt_tok_s"]["median"])
            mine["ttft_vs_baseline_pct"] = _pct(mine["ttft_s"]["median"], theirs["ttft_s"]["median"])


def run_matrix(model: str | Path | None = None, progress: Progress | None = None,
               cancel: threading.Event | None = None, repeats: int = 3, quick: bool = False,
               draft_model: str | None = None, threads: int | None = None, timeout_s: float = 600.0,
               rows: list[str] | None = None, row_overrides: dict[str, dict] | None = None,
               interleave: bool = True, save: bool = True) -> dict:
    """Measure the matrix; returns the result (also saved under data_dir()/bench/ when `save`).

    progress(fraction, message) is called between steps; setting `cancel` stops the running child and raises
    MatrixCancelled. `quick` shortens the answers (for tests and a first look). `rows` picks row ids;
    `row_overrides` changes a row's settings (e.g. {"combined": {"flash_attn": "off"}}). `interleave` runs
    the repeats as rounds over all rows, each in a fresh process (fair on a busy machine); without it each row
    runs all its repeats in one process (fewer loads: for big models).
    """
    import llama_cpp

    from app.bench.bandwidth import measure_bandwidth
    from app.bench.machine import describe_machine, load_average
    from app.core import library
    from app.core.gguf_info import read_gguf_info
    from app.core.metrics import default_threads
    from app.core.modelfile import check_model_file

    wall = time.perf_counter()
    cancel = cancel or threading.Event()
    threads = threads or default_threads()
    source = Path(library.resolve(model or "bundled").path).resolve()
    check_model_file(source)
    if draft_model:
        draft_model = str(Path(library.resolve(draft_model).path).resolve())
    chosen = _choose_rows(rows, row_overrides)
    drafters = ["lookup"] + (["draft-model"] if draft_model else [])
    workloads = {name: {"messages": w["messages"], "max_tokens": QUICK_TOKENS[name] if quick else w["max_tokens"]}
                 for name, w in WORKLOADS.items()}
    offload = bool(llama_cpp.llama_supports_gpu_offload())
    qtypes = sorted({r["qtype"] for r in chosen})
    jobs = sum(len(drafters) if r.get("spec") else 1 for r in chosen)
    steps = 1 + len(qtypes) + jobs * (repeats if interleave else 1)  # refined once the variants are known
    done_steps = [0]

    def report(message: str, within: float = 0.0) -> None:
        if cancel.is_set():
            raise MatrixCancelled("The benchmark was cancelled.")
        if progress:
            progress(min(1.0, (done_steps[0] + within) / steps), message)

    result = {
        "kind": "hearth-bench-matrix",
        "version": 1,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": source.name,
        "model_path": str(source),
        "machine": describe_machine(),
        "load_average_start": load_average(),
        "threads": threads,
        "repeats": repeats,
        "interleaved": interleave,
        "quick": quick,
        "n_ctx": N_CTX,
        "workloads": {n: {"label": WORKLOADS[n]["label"], "max_tokens": w["max_tokens"]}
                      for n, w in workloads.items()},
        "rows": [],
    }
    report("measuring memory bandwidth")
    result["bandwidth"] = measure_bandwidth(threads, size_mb=64 if quick else 256)
    bw = result["bandwidth"]["read_gb_s"]
    done_steps[0] += 1

    variants: dict[str, dict] = {}
    for qtype in qtypes:
        report(f"preparing {qtype}")
        try:
            variants[qtype] = prepare_variant(source, qtype, lambda f, m: report(m, f), cancel)
        except MatrixCancelled:
            raise
        except HearthError as exc:
            if cancel.is_set():
                raise MatrixCancelled("The benchmark was cancelled.") from None
            variants[qtype] = {"error": f"could not prepare the {qtype} file: {exc}"}
        done_steps[0] += 1

    # Every row first, then the measurements: with `interleave`, round r runs each configuration once in a fresh
    # process, so a neighbour's burst of work on a shared machine lands on all rows alike, not on one.
    jobs_todo: list[tuple[dict, str | None, dict]] = []  # (row, drafter, child config)
    for spec_row in chosen:
        row = {"id": spec_row["id"], "label": spec_row["label"], "qtype": spec_row["qtype"],
               "kv_type": spec_row.get("kv_type", "f16"), "flash_attn": spec_row.get("flash_attn", "off"),
               "speculative": bool(spec_row.get("spec")), "status": "ok"}
        gpu_layers = 0
        if spec_row.get("gpu"):
            gpu_layers = -1 if offload else 0
            row["gpu_offload"] = "all layers" if offload else "n/a (CPU-only build)"
        row["gpu_layers"] = gpu_layers
        variant = variants[spec_row["qtype"]]
        result["rows"].append(row)
        if "error" in variant:
            row.update(status="failed", reason=variant["error"])
            continue
        info = read_gguf_info(variant["path"])
        row.update(model_file=variant["path"], variant_cached=variant["cached"], file_size_bytes=info.file_size,
                   bytes_per_token=bytes_read_per_token(info))
        for drafter in drafters if spec_row.get("spec") else [None]:
            jobs_todo.append((row, drafter, {
                "row": row["id"], "model": variant["path"], "threads": threads, "gpu_layers": gpu_layers,
                "kv_type": row["kv_type"], "flash_attn": row["flash_attn"], "drafter": drafter,
                "draft_model": draft_model, "repeats": 1 if interleave else repeats, "workloads": workloads,
                "quick": quick}))
    rounds = repeats if interleave else 1
    steps = done_steps[0] + rounds * len(jobs_todo)
    runs: dict[tuple[str, str | None], dict] = {}
    for rnd in range(rounds):
        for row, drafter, cfg in jobs_todo:
            key = (row["id"], drafter)
            if key in runs and not runs[key]["ok"]:
                done_steps[0] += 1
                continue  # failed once: a configuration that cannot run is not retried
            title = row["label"] + (f" ({drafter})" if drafter else "")
            if rounds > 1:
                title += f", round {rnd + 1}/{rounds}"
            report(title)
            load_before = load_average()
            run = run_child(cfg, timeout_s, cancel, on_note=lambda m, t=title: report(f"{t}: {m}"))
            run["load_average"] = [[load_before, load_average()]]
            runs[key] = _merge_runs(runs.get(key), run)
            done_steps[0] += 1
    for row in result["rows"]:
        mine = {d: r for (rid, d), r in runs.items() if rid == row["id"]}
        if mine:
            _fill_row(row, mine, list(workloads), bw)

    _add_deltas(result["rows"], list(workloads))
    result["load_average_end"] = load_average()
    result["wall_s"] = time.perf_counter() - wall
    if progress:
        progress(1.0, "done")
    if save:
        folder = paths.data_dir() / "bench"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"matrix-{time.strftime('%Y%m%d-%H%M%S')}.json"
        result["saved_to"] = str(target)
        target.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


OVERRIDABLE = {"qtype": ("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0"), "kv_type": ("f16", "q8_0", "q4_0"),
               "flash_attn": ("on", "off", "auto")}


def _choose_rows(rows: list[str] | None, overrides: dict[str, dict] | None) -> list[dict]:
    ids = [r["id"] for r in ROWS]
    for rid in list(rows or []) + list(overrides or {}):
        if rid not in ids:
            raise HearthError(f"There is no configuration '{rid}' in the matrix; use one of {', '.join(ids)}.")
    for rid, changes in (overrides or {}).items():
        for key, value in changes.items():
            if key not in OVERRIDABLE or value not in OVERRIDABLE[key]:
                raise HearthError(f"'{rid}.{key}={value}' cannot be set; settable: "
                                  + "; ".join(f"{k} ({', '.join(v)})" for k, v in OVERRIDABLE.items()) + ".")
    return [dict(r, **(overrides or {}).get(r["id"], {})) for r in ROWS if rows is None or r["id"] in rows]


def parse_settings(items: list[str]) -> dict[str, dict]:
    """['combined.flash_attn=off'] -> {'combined': {'flash_attn': 'off'}}"""
    out: dict[str, dict] = {}
    for item in items:
        target, sep, value = item.partition("=")
        rid, dot, key = target.partition(".")
        if not (sep and dot and rid and key):
            raise HearthError(f"'{item}' is not ROW.KEY=VALUE, for example combined.kv_type=q4_0.")
        value = value.strip()
        out.setdefault(rid.strip(), {})[key.strip()] = value.upper() if key.strip() == "qtype" else value
    return out


def _merge_runs(old: dict | None, new: dict) -> dict:
    """Add one child's runs to those of the same configuration in earlier rounds."""
    if old is None or not new["ok"]:
        return new
    old["pp512"] += new["pp512"]
    for w, runs in new["workloads"].items():
        old["workloads"][w] += runs
    old["peak_rss_mb"] = max(old["peak_rss_mb"], new["peak_rss_mb"])
    old["gpu_mb"] = max((v for v in (old.get("gpu_mb"), new.get("gpu_mb")) if v is not None), default=None)
    old["load_s"] = min(old["load_s"], new["load_s"])
    old["load_average"] += new["load_average"]
    return old


def _fill_row(row: dict, runs: dict, workloads: list[str], bw: float) -> None:
    """Medians per workload; for speculative rows the fastest drafter per workload (the others stay listed)."""
    ok = {d: r for d, r in runs.items() if r["ok"]}
    row["attempts"] = {d or "plain": ({"status": "ok", "load_s": r["load_s"], "load_average": r["load_average"]}
                                      if r["ok"] else {"status": "failed", "reason": r["reason"]})
                       for d, r in runs.items()}
    if not ok:
        row.update(status="failed", reason="; ".join(r["reason"] for r in runs.values()))
        return
    per_drafter = {d: {w: _summarize_workload(r["workloads"][w], row["bytes_per_token"], bw) for w in workloads}
                   for d, r in ok.items()}
    row["workloads"] = {}
    for w in workloads:
        best = max(per_drafter, key=lambda d: per_drafter[d][w]["gen_tok_s"]["median"])
        row["workloads"][w] = per_drafter[best][w]
        if len(runs) > 1:
            row["workloads"][w]["others"] = {d: per_drafter[d][w]["gen_tok_s"]["median"]
                                             for d in per_drafter if d != best}
    row["pp512"] = _stat([x for r in ok.values() for x in r["pp512"]])
    row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ok.values())
    row["gpu_mb"] = max((r["gpu_mb"] for r in ok.values() if r.get("gpu_mb") is not None), default=None)
    row["load_s"] = min(r["load_s"] for r in ok.values())
    row["extra_bufts"] = next(iter(ok.values()))["extra_bufts"]
    failed = {d: r["reason"] for d, r in runs.items() if not r["ok"]}
    if failed:
        row["note"] = "; ".join(f"{d} failed: {reason}" for d, reason in failed.items())


# --- output ------------------------------------------------------------------------------
def _fmt_pct(p: float | None) -> str:
    return "" if p is None else f" ({p:+.0f}%)"


def _fmt_stat(s: dict | None, digits: int = 1, scale: float = 1.0) -> str:
    if not s:
        return "-"
    return f"{s['median'] * scale:.{digits}f} [{s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f}]"


def table_rows(result: dict, workload: str) -> list[list[str]]:
    """Header plus one line per row: what the CLI prints, the README shows and the GUI can put in a table."""
    out = [["config", "prompt tok/s", "gen tok/s", "TTFT ms", "peak RSS MB", "file MB", "acceptance",
            "BW bound"]]
    for row in result["rows"]:
        name = row["label"]
        if row.get("gpu_offload"):
            name += f" [GPU: {row['gpu_offload']}]"
        if row["status"] != "ok":
            out.append([name, f"FAILED: {row.get('reason', 'unknown')}"] + [""] * 6)
            continue
        w = row["workloads"][workload]
        base = row.get("vs_baseline", {})
        spec = w.get("spec")
        accept = "-"
        if spec:  # the adaptive engine may decide that no draft pays: say so rather than "0%"
            accept = (f"{100 * spec['acceptance']:.0f}%" if spec["drafted"] else "none drafted") + \
                f" ({spec['drafter']})"
        out.append([
            name,
            _fmt_stat(w["prompt_tok_s"], 0) + _fmt_pct(w.get("prompt_vs_baseline_pct")),
            _fmt_stat(w["gen_tok_s"]) + _fmt_pct(w.get("gen_vs_baseline_pct")),
            _fmt_stat(w["ttft_s"], 0, 1000.0) + _fmt_pct(w.get("ttft_vs_baseline_pct")),
            f"{row['peak_rss_mb']:.0f}" + _fmt_pct(base.get("peak_rss_pct")),
            f"{row['file_size_bytes'] / 1e6:.0f}" + _fmt_pct(base.get("file_size_pct")),
            accept,
            f"{100 * w['bandwidth_share']:.0f}%" if w.get("bandwidth_share") is not None else "-",
        ])
    return out


def busy_warning(result: dict) -> str | None:
    """Other programs running meanwhile slow every row, and llama.cpp's threads more than their share."""
    cores = result["machine"].get("physical_cores") or 1
    loads = [x[0] for x in (result.get("load_average_start"), result.get("load_average_end")) if x]
    if not loads or max(loads) < cores:
        return None
    return (f"Warning: the machine was busy (load average up to {max(loads):.1f} on {cores} cores): all figures "
            "are lower and noisier than on an idle machine; compare rows of this run with each other.")


def format_markdown(result: dict) -> str:
    from app.bench.machine import machine_label

    bw = result["bandwidth"]
    lines = [f"Model: {result['model']}; {result['threads']} threads; median [min-max] of {result['repeats']} "
             f"runs{' (quick)' if result.get('quick') else ''}; % = change vs the F16 baseline.",
             f"Machine: {machine_label(result['machine'])}; measured read bandwidth {bw['read_gb_s']:.1f} GB/s; "
             f"load average {result.get('load_average_start')} at start, {result.get('load_average_end')} at end; "
             f"whole run {result['wall_s'] / 60:.1f} min.", ""]
    busy = busy_warning(result)
    if busy:
        lines.insert(2, busy)
    for name, w in result["workloads"].items():
        rows = table_rows(result, name)
        lines.append(f"Workload: {w['label']} (up to {w['max_tokens']} tokens)")
        lines.append("")
        lines.append("| " + " | ".join(rows[0]) + " |")
        lines.append("|" + "---|" * len(rows[0]))
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        lines.append("")
    for row in result["rows"]:
        if row.get("status") == "ok" and row.get("pp512"):
            lines.append(f"pp512 {row['label']}: {_fmt_stat(row['pp512'], 0)} tok/s"
                         + _fmt_pct(row.get("vs_baseline", {}).get("pp512_pct")))
        if row.get("note"):
            lines.append(f"note {row['label']}: {row['note']}")
    return "\n".join(lines)


def write_csv(result: dict, path: str | Path) -> None:
    header = ["workload", "config", "status", "reason", "qtype", "kv_type", "flash_attn", "gpu_layers",
              "prompt_tok_s", "prompt_tok_s_min", "prompt_tok_s_max", "gen_tok_s", "gen_tok_s_min", "gen_tok_s_max",
              "gen_vs_baseline_pct", "ttft_ms", "ttft_ms_min", "ttft_ms_max", "peak_rss_mb", "file_size_mb",
              "drafter", "acceptance", "bandwidth_share", "pp512_tok_s"]
    try:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh)
            out.writerow(header)
            for name in result["workloads"]:
                for row in result["rows"]:
                    base = [name, row["label"], row["status"], row.get("reason", ""), row["qtype"], row["kv_type"],
                            row["flash_attn"], row["gpu_layers"]]
                    if row["status"] != "ok":
                        out.writerow(base + [""] * (len(header) - len(base)))
                        continue
                    w = row["workloads"][name]
                    spec = w.get("spec") or {}
                    p, g, t = w["prompt_tok_s"], w["gen_tok_s"], w["ttft_s"]
                    out.writerow(base + [
                        f"{p['median']:.2f}", f"{p['min']:.2f}", f"{p['max']:.2f}",
                        f"{g['median']:.2f}", f"{g['min']:.2f}", f"{g['max']:.2f}",
                        "" if w.get("gen_vs_baseline_pct") is None else f"{w['gen_vs_baseline_pct']:.1f}",
                        f"{t['median'] * 1000:.1f}", f"{t['min'] * 1000:.1f}", f"{t['max'] * 1000:.1f}",
                        f"{row['peak_rss_mb']:.1f}", f"{row['file_size_bytes'] / 1e6:.1f}",
                        spec.get("drafter", ""), "" if not spec else f"{spec['acceptance']:.3f}",
                        "" if w.get("bandwidth_share") is None else f"{w['bandwidth_share']:.3f}",
                        f"{row['pp512']['median']:.1f}",
                    ])
    except OSError as exc:
        raise HearthError(f"Could not write the CSV file {path}: {exc.strerror or exc}.") from None


def save_plot(result: dict, path: str | Path) -> None:
    """Bar chart: generation tok/s per row (min-max whiskers), one group per workload, and peak RSS per row."""
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QPen

    from app.bench.canvas import white_canvas
    from app.bench.machine import machine_label

    width, height = 1100, 640
    image, painter, _app = white_canvas(width, height)
    colors = [QColor(c) for c in ("#7f7f7f", "#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd")]
    rows = result["rows"]
    names = list(result["workloads"])
    painter.setFont(QFont("Sans", 11))
    painter.drawText(QPointF(20, 24), f"hearth bench matrix: {result['model']}, median of {result['repeats']} runs")
    painter.setFont(QFont("Sans", 8))
    painter.drawText(QPointF(20, 42), f"{machine_label(result['machine'])}; {result['threads']} threads; "
                                      f"load average at start {result.get('load_average_start')}")

    def panel(box: QRectF, title: str, groups: list[str], value) -> None:
        values = [value(r, g) for g in groups for r in rows]
        top = max([v[2] for v in values if v] or [1.0]) * 1.15
        painter.setPen(QPen(QColor("black")))
        painter.drawRect(box)
        painter.drawText(QPointF(box.left(), box.top() - 6), title)
        painter.drawText(QPointF(box.left() - 48, box.top() + 10), f"{top:.0f}")
        painter.drawText(QPointF(box.left() - 20, box.bottom()), "0")
        group_w = box.width() / len(groups)
        bar_w = group_w * 0.8 / len(rows)
        for gi, g in enumerate(groups):
            x0 = box.left() + gi * group_w + group_w * 0.1
            painter.setPen(QPen(QColor("black")))
            painter.drawText(QRectF(box.left() + gi * group_w, box.bottom() + 4, group_w, 18),
                             Qt.AlignHCenter, result["workloads"][g]["label"] if g in result["workloads"] else "")
            for ri, r in enumerate(rows):
                x = x0 + ri * bar_w
                v = value(r, g)
                if v is None:
                    painter.setPen(QPen(QColor("#d62728")))
                    painter.drawText(QRectF(x, box.bottom() - 40, bar_w, 36), Qt.AlignCenter | Qt.TextWordWrap,
                                     "failed")
                    continue
                med, lo, hi = v
                h = box.height() * med / top
                painter.fillRect(QRectF(x + 2, box.bottom() - h, bar_w - 4, h), colors[ri % len(colors)])
                painter.setPen(QPen(QColor("black"), 1))
                cx = x + bar_w / 2
                if hi > lo:
                    painter.drawLine(QPointF(cx, box.bottom() - box.height() * lo / top),
                                     QPointF(cx, box.bottom() - box.height() * hi / top))
                painter.drawText(QRectF(x, box.bottom() - h - 16, bar_w, 14), Qt.AlignHCenter, f"{med:.0f}")

    def gen(r: dict, g: str):
        if r["status"] != "ok":
            return None
        s = r["workloads"][g]["gen_tok_s"]
        return s["median"], s["min"], s["max"]

    def rss(r: dict, _g: str):
        return None if r["status"] != "ok" else (r["peak_rss_mb"],) * 3

    panel(QRectF(70, 80, 640, 440), "generation tok/s (median, whisker: min-max)", names, gen)
    panel(QRectF(790, 80, 280, 440), "peak engine RSS (MB)", ["rss"], rss)
    # Legend
    for ri, r in enumerate(rows):
        x = 70 + (ri % 3) * 340
        y = 570 + (ri // 3) * 22
        painter.fillRect(QRectF(x, y - 11, 14, 14), colors[ri % len(colors)])
        painter.setPen(QPen(QColor("black")))
        label = r["label"] + ("" if r["status"] == "ok" else " (failed)")
        painter.drawText(QPointF(x + 20, y + 1), label)
    painter.end()
    if not image.save(str(path), "PNG"):
        raise HearthError(f"Could not write the plot to {path}.")


# --- command line ----------------------------------------------------------------------
def register(kinds) -> None:
    p = kinds.add_parser("matrix", help="F16 / INT8 / INT4 / +speculative / combined, on this machine",
                         description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", metavar="PATH|NAME", default=argparse.SUPPRESS,
                   help="GGUF file or library name (default: the bundled model)")
    p.add_argument("--threads", type=int, metavar="N", default=argparse.SUPPRESS,
                   help="CPU threads (default: physical cores)")
    p.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per figure (default 3)")
    p.add_argument("--quick", action="store_true", help="short answers and one run each: a first look")
    p.add_argument("--draft-model", metavar="PATH|NAME", help="also try this draft model in the speculative rows")
    p.add_argument("--rows", metavar="ID,...", help=f"only these configurations ({', '.join(r['id'] for r in ROWS)})")
    p.add_argument("--set", action="append", default=[], metavar="ROW.KEY=VALUE", dest="settings",
                   help="change a configuration, e.g. combined.kv_type=q4_0 (keys: qtype, kv_type, flash_attn)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="stop a configuration after S seconds and mark it failed (default 600)")
    p.add_argument("--no-interleave", dest="interleave", action="store_false",
                   help="run each configuration's repeats in one process instead of in rounds over all of them "
                   "(fewer model loads, for big models; less fair when other programs run)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--csv", metavar="PATH", help="also write the table as CSV")
    p.add_argument("--plot", metavar="PATH", help="also write a bar chart PNG")
    p.add_argument("--no-save", action="store_true", help="do not keep the result under the data folder's bench/")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def show(fraction: float, message: str) -> None:
        if not args.json:
            print(f"[{100 * fraction:3.0f}%] {message}", file=sys.stderr, flush=True)

    repeats = 1 if args.quick and args.repeats == 3 else max(1, args.repeats)
    try:
        rows = [r.strip() for r in args.rows.split(",") if r.strip()] if args.rows else None
        result = run_matrix(getattr(args, "model", None), progress=show, repeats=repeats, quick=args.quick,
                            draft_model=args.draft_model, threads=getattr(args, "threads", None),
                            timeout_s=args.timeout, rows=rows, row_overrides=parse_settings(args.settings),
                            interleave=args.interleave, save=not args.no_save)
    except MatrixCancelled:
        print("Cancelled.", file=sys.stderr)
        return 130
    if args.csv:
        write_csv(result, args.csv)
        result["csv"] = args.csv
    if args.plot:
        save_plot(result, args.plot)
        result["plot"] = args.plot
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_markdown(result))
        if result.get("saved_to"):
            print(f"\nSaved to {result['saved_to']}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(worker_main())
    sys.exit("usage: python -m app.bench.matrix --worker (a child of `hearth bench matrix`)")
