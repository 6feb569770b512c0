"""`hearth bench matrix`: what each technique buys on this machine, with this model.

Rows (the reference article's ladder, reproduced locally):
  1. F16 baseline            2. Q8_0 ("INT8")            3. Q4_K_M ("INT4")
  4. Q4_K_M + speculative decoding (the best drafter for each workload)
  5. combined: Q4_K_M + speculative + q8_0 KV cache + flash attention (+ all layers on the GPU
     when this llama.cpp build can offload; otherwise shown as "n/a (CPU-only build)").
Rows 1-4 use an f16 KV cache with flash attention off, so row 5 shows what those two add.

Measured per row, in a fresh child process per row (app/bench/matrix_worker.py, so its peak RSS is
its own), through the same Session and Decoder the engine runs:
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

import json
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from app.bench.bandwidth import measure_bandwidth
from app.bench.machine import describe_machine, load_average
from app.bench.matrix_plan import N_CTX, QUICK_TOKENS, WORKLOADS, MatrixOptions, choose_rows, parse_settings
from app.bench.matrix_report import format_markdown, write_csv
from app.bench.matrix_stats import add_deltas, bytes_read_per_token, fill_row, merge_runs
from app.bench.results import KIND, save_result
from app.bench.variants import Progress, prepare_variant
from app.core import library, paths
from app.core.errors import HearthError
from app.core.gguf.info import read_gguf_info
from app.core.metrics import default_threads
from app.core.gguf.modelfile import check_model_file
from app.core.proc import ENTRY_FLAGS, EVENT, JsonChild, exit_reason, is_frozen

WORKER = "app.bench.matrix_worker"


class MatrixCancelled(HearthError):
    """The user stopped the benchmark."""


def run_child(cfg: dict, timeout_s: float, cancel: threading.Event | None = None,
              on_note: Callable[[str], None] | None = None) -> dict:
    """One configuration in a fresh process: {"ok": True, ...runs} or {"ok": False, "reason": sentence}."""
    if is_frozen() and WORKER not in ENTRY_FLAGS:
        return {"ok": False, "reason": "this build of Hearth cannot start the benchmark's measuring process"}
    log = paths.log_dir() / f"bench-matrix-{cfg['row']}-{cfg.get('drafter') or 'plain'}.log"
    deadline = time.monotonic() + timeout_s
    final = None

    def tick() -> None:
        if cancel is not None and cancel.is_set():
            raise MatrixCancelled("The benchmark was cancelled.")
        if time.monotonic() > deadline:
            raise TimeoutError

    try:
        with open(log, "wb") as err, JsonChild(WORKER, log=err, stdin=json.dumps(cfg).encode()) as child:
            for event in child.events(on_tick=tick):
                if event.get(EVENT) == "progress":
                    if on_note:
                        on_note(event["message"])
                else:
                    final = event
            code = child.wait()
    except TimeoutError:
        return {"ok": False, "reason": f"it took longer than {timeout_s:.0f} s and was stopped"}
    if final is None:
        return {"ok": False, "reason": f"its process stopped unexpectedly: {exit_reason(code)}; its log is at {log}"}
    if final[EVENT] == "error":
        return {"ok": False, "reason": final["message"]}
    return {"ok": True, **{k: v for k, v in final.items() if k != EVENT}}


def run_matrix(model: str | Path | None = None, progress: Progress | None = None,
               cancel: threading.Event | None = None, repeats: int = 3, quick: bool = False,
               draft_model: str | None = None, threads: int | None = None, timeout_s: float = 600.0,
               rows: list[str] | None = None, row_overrides: dict[str, dict] | None = None,
               interleave: bool = True, save: bool = True, quality: bool = True,
               quality_text: str | None = None) -> dict:
    """Measure the matrix; returns the result (also saved under data_dir()/bench/ when `save`).

    progress(fraction, message) is called between steps; setting `cancel` stops the running child and raises
    MatrixCancelled. `quick` shortens the answers (for tests and a first look). `rows` picks row ids;
    `row_overrides` changes a row's settings (e.g. {"combined": {"flash_attn": "off"}}). `interleave` runs
    the repeats as rounds over all rows, each in a fresh process (fair on a busy machine); without it each row
    runs all its repeats in one process (fewer loads: for big models).
    """
    import llama_cpp

    wall = time.perf_counter()
    cancel = cancel or threading.Event()
    threads = threads or default_threads()
    source = Path(library.resolve(model or "bundled").path).resolve()
    check_model_file(source)
    if draft_model:
        draft_model = str(Path(library.resolve(draft_model).path).resolve())
    chosen = choose_rows(rows, row_overrides)
    text = None
    if quality and quality_text:
        from app.bench.quality import _read_text

        text = _read_text(quality_text)  # a bad file is one sentence before anything is measured
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
        "kind": KIND,
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
            runs[key] = merge_runs(runs.get(key), run)
            done_steps[0] += 1
    for row in result["rows"]:
        mine = {d: r for (rid, d), r in runs.items() if rid == row["id"]}
        if mine:
            fill_row(row, mine, list(workloads), bw)

    if quality:
        from app.bench.matrix_quality import measure_quality

        report("quality against F16")
        try:
            base = variants["F16"] if "F16" in variants else prepare_variant(source, "F16", cancel=cancel)
        except HearthError as exc:
            base = {"error": str(exc)}
        if "error" in base:
            result["quality"] = {"error": f"no F16 variant to compare against: {base['error']}"}
        else:
            result["quality"] = measure_quality(result["rows"], base["path"], text, quick, threads, report)
            if quality_text:
                result["quality"]["text"] = str(Path(quality_text).expanduser())

    add_deltas(result["rows"], list(workloads))
    result["load_average_end"] = load_average()
    result["wall_s"] = time.perf_counter() - wall
    if progress:
        progress(1.0, "done")
    if save:
        save_result(result)
    return result


def run(options: MatrixOptions, plot: Callable[[dict, str], None] | None = None) -> int:
    """`hearth bench matrix`: progress on stderr, the table (or JSON) on stdout. plot(result, path) draws
    the chart for --plot; the command line passes the window's Qt painter (app/ui/bench/matrix_plot.py)."""
    def show(fraction: float, message: str) -> None:
        if not options.json:
            print(f"[{100 * fraction:3.0f}%] {message}", file=sys.stderr, flush=True)

    repeats = 1 if options.quick and options.repeats == 3 else max(1, options.repeats)
    try:
        rows = [r.strip() for r in options.rows.split(",") if r.strip()] if options.rows else None
        result = run_matrix(options.model, progress=show, repeats=repeats, quick=options.quick,
                            draft_model=options.draft_model, threads=options.threads,
                            timeout_s=options.timeout, rows=rows, row_overrides=parse_settings(options.settings),
                            interleave=options.interleave, save=not options.no_save,
                            quality=not options.no_quality, quality_text=options.quality_text)
    except MatrixCancelled:
        print("Cancelled.", file=sys.stderr)
        return 130
    if options.csv:
        write_csv(result, options.csv)
        result["csv"] = options.csv
    if options.plot:
        if plot is None:
            raise HearthError("This build of Hearth cannot draw charts.")
        plot(result, options.plot)
        result["plot"] = options.plot
    if options.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_markdown(result))
        if result.get("saved_to"):
            print(f"\nSaved to {result['saved_to']}")
    return 0

