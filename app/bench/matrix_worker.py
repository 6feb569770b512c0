"""The child process of `hearth bench matrix`: one configuration, measured in a process of its own.

`python -m app.bench.matrix_worker` (the frozen app: --bench-matrix-worker) reads the configuration as JSON on
stdin, loads the model through the same Session and Decoder the engine runs, warms up, measures, and writes
JSON lines: progress notes, then the raw runs as the last line (the parent, app/bench/matrix.py, takes
medians). A fresh process per configuration makes its peak RSS its own.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time

from app.bench.matrix_plan import N_CTX, PP_TOKENS
from app.core.errors import HearthError
from app.core.metrics import peak_rss_mb
from app.core.proc import emit as emit_event
from app.core.proc import keep_stdout_for_events


def measure(cfg: dict) -> dict:
    """Runs in the child: load, warm up, measure; returns raw runs (the parent takes medians)."""
    import llama_cpp  # noqa: F401 - loaded before timing anything

    from app.bench.basic import _emitter, measure_pp
    from app.core.library.bundled import bundled_model_path
    from app.core.metrics import rss_mb
    from app.protocol.messages import LoadOptions, SamplingOptions
    from app.engine.process.session import Session

    def note(message: str) -> None:
        emit_event("progress", message=message)

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
        # nvidia-smi shows it; app/engine/probes/gpu_memory.py). None on a CPU-only build.
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


def main() -> int:
    """Config JSON on stdin, JSON lines out, the last one the result (or the error)."""
    _exit_with_parent()
    keep_stdout_for_events()  # whatever llama.cpp prints must not corrupt the result channel
    cfg = json.loads(sys.stdin.read())
    try:
        emit_event("result", **measure(cfg))
    except HearthError as exc:
        emit_event("error", message=str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
