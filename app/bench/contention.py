"""`hearth bench contention`: generation speed while other programs use the CPU, fixed thread counts against
adaptive threads (app/engine/decoding/threads.py), in one run.

Conditions: idle; one core busy; every core busy. The bench makes the load itself with busy loops in child
processes (each one ends on its own after a deadline too, so none outlives a bench that is killed) and
stops them after each condition. In each condition every configuration generates the same greedy answer
of fixed length (each run on a freshly loaded model, so adaptive starts from the full count as it does
after a load); a run that would take too long is cut at RUN_LIMIT_S and its rate taken from what it made.
Reported: tok/s per condition and configuration, adaptive against the best fixed count in that condition,
and adaptive idle against the default fixed count (all physical cores).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from app.bench.model_options import ModelOptions
from app.protocol.option_spec import count, option
from app.core.metrics import default_threads
from app.protocol import messages as P
from app.engine.decoding.decode import Decoder
from app.engine.decoding.runtime import Runtime

PROMPT = "Write a long story about a lighthouse keeper and a storm."
RUN_LIMIT_S = 12.0
SETTLE_S = 0.5  # after starting busy loops, before measuring
BUSY_LOOP = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


@dataclass
class ContentionOptions(ModelOptions):
    tokens: int = option(200, "--tokens", "tokens per answer (default {default})", "N", bound=count(1, "tokens"))
    repeats: int = option(3, "--repeats", "runs per figure; medians are reported", "N", bound=count(1, "runs"))
    json: bool = option(False, "--json", "the report as JSON on stdout (rows go to stderr)")


class BusyLoops:
    """n processes spinning on a core each, for at most `limit` seconds."""

    def __init__(self, n: int, limit: float):
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(limit=limit)]) for _ in range(n)]

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def generate_rate(options: ContentionOptions, threads: int | None) -> dict:
    """tok/s of one greedy answer on a freshly loaded model (threads None: adaptive)."""
    rt = Runtime(P.LoadOptions(model_path=options.model, n_ctx=1024, n_threads=threads,
                               n_gpu_layers=options.gpu_layers), extra_bufts=True)
    try:
        decoder = Decoder(rt)
        cancelled = threading.Event()
        timer = threading.Timer(RUN_LIMIT_S, cancelled.set)
        timer.start()
        try:
            done = decoder.generate(PROMPT, P.SamplingOptions(max_tokens=options.tokens, temperature=0.0,
                                                              repeat_penalty=1.0, ignore_eos=True),
                                    lambda event: None, cancelled)
        finally:
            timer.cancel()
        return {"tok_s": done["gen_tok_s"], "tokens": done["completion_tokens"], "n_threads_end": done["n_threads"],
                "threads_reason": done.get("threads_reason")}
    finally:
        rt.close()


def run(options: ContentionOptions) -> int:
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if options.json else (lambda *a: print(*a, flush=True))
    top = options.threads or default_threads()
    configs = [(f"{n} thread{'s' if n > 1 else ''}", n) for n in range(1, top + 1)] + [("adaptive", None)]
    cores = os.cpu_count() or top
    conditions = [("idle", 0), ("one core busy", 1), (f"all {cores} cores busy", cores)]
    load = f"; load average before: {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    say(f"hearth bench contention: {options.tokens} greedy tokens, {options.repeats} runs per figure, medians{load}")
    rows = []
    for label, busy in conditions:
        per_run = RUN_LIMIT_S + 2.0
        loops = BusyLoops(busy, limit=per_run * len(configs) * options.repeats + 30) if busy else None
        try:
            if loops:
                time.sleep(SETTLE_S)
            figures = {}
            for name, threads in configs:
                runs = [generate_rate(options, threads) for _ in range(options.repeats)]
                figures[name] = {"tok_s": statistics.median(r["tok_s"] for r in runs),
                                 "runs": [round(r["tok_s"], 1) for r in runs],
                                 "n_threads_end": [r["n_threads_end"] for r in runs]}
                say(f"  {label}: {name} {figures[name]['tok_s']:.1f} tok/s {figures[name]['runs']}")
        finally:
            if loops:
                loops.stop()
        fixed = {name: f["tok_s"] for name, f in figures.items() if name != "adaptive"}
        best = max(fixed, key=fixed.get)
        rows.append({"condition": label, "busy_loops": busy, "figures": figures, "best_fixed": best,
                     "adaptive_vs_best": figures["adaptive"]["tok_s"] / fixed[best] if fixed[best] else None})
    default = configs[top - 1][0]
    idle = rows[0]["figures"]
    report = {"kind": "hearth-bench-contention", "model": options.model, "tokens": options.tokens,
              "repeats": options.repeats, "rows": rows,
              "adaptive_idle_vs_default": idle["adaptive"]["tok_s"] / idle[default]["tok_s"]}
    print(json.dumps(report, indent=2) if options.json
          else format_table(report, [name for name, _ in configs], default))
    return 0


def format_table(report: dict, names: list[str], default: str) -> str:
    lines = ["| condition | " + " | ".join(f"{n} tok/s" for n in names) + " | adaptive / best fixed |",
             "|---" * (len(names) + 2) + "|"]
    for row in report["rows"]:
        cells = [f"{row['figures'][n]['tok_s']:.1f}" for n in names]
        lines.append(f"| {row['condition']} | " + " | ".join(cells) + f" | {row['adaptive_vs_best']:.2f}x |")
    lines.append(f"\nadaptive idle / {default} (the default before adaptive threads): "
                 f"{report['adaptive_idle_vs_default']:.2f}x")
    return "\n".join(lines)
