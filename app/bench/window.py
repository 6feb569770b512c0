"""`hearth bench window`: endless generation in a fixed context, and the attention-sink effect.

1. Generates --tokens tokens (default 20,000) in a --ctx context (default 1,024) under the
   `window` policy: the run must finish, memory must stay flat (RSS at the end vs after the
   first ctx tokens) and speed must stay flat (tok/s over the last 1,000 tokens vs tokens
   1,000-2,000). The tok/s and RSS series are printed, and plotted with --plot.
2. The same run under `truncate-middle`, which evaluates the recent part again each time
   the context is full: its pauses are printed.
3. StreamingLLM's perplexity experiment on a long text that ships with Python: full cache,
   a window of W tokens with 4 sinks, and the same window with no sinks.
With --policies full,window,h2o it compares the context policies instead, at the same KV budgets
(app/bench/window_policies.py): perplexity, a retrieval probe, speed per token and memory.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import llama_cpp
import numpy as np

from app.bench.model_options import CONTEXT_BOUND, ModelOptions
from app.protocol.option_spec import Bound, count, option
from app.bench.window_texts import REQUEST, SYSTEM, long_text
from app.core.errors import HearthError
from app.core.gguf.modelfile import check_model_file
from app.engine.decoding.decode import fill_batch
from app.engine.probes.probe import extra_bufts_decision
from app.protocol.messages import STATS, LoadOptions, SamplingOptions
from app.engine.decoding.runtime import Runtime
from app.engine.process.session import Session

BLOCK = 1000  # tokens per point of the tok/s and RSS series


@dataclass
class WindowOptions(ModelOptions):
    tokens: int = option(20000, "--tokens", "tokens to generate (default {default})", "N", bound=count(1, "tokens"))
    ctx: int = option(1024, "--ctx", "context size (default {default})", "N", bound=CONTEXT_BOUND)
    compare_tokens: int | None = option(None, "--compare-tokens", "tokens for the truncate-middle run (default: "
                                        "--tokens; 0 skips it)", "N", bound=count(0, "tokens"))
    ppl_tokens: int = option(3000, "--ppl-tokens", "text length for perplexity (default {default})", "N",
                             bound=count(2, "tokens"))
    ppl_window: int = option(256, "--ppl-window", "window for perplexity (default {default})", "W",
                             bound=Bound(2, takes="a window of 2 or more tokens"))
    sinks: int = option(4, "--sinks", "attention sinks (default {default})", "N", bound=count(0, "sink tokens"))
    # "full,window,h2o": the policy comparison instead of the long run
    policies: str | None = option(None, "--policies", "compare context policies instead (full,window,h2o): "
                                  "perplexity, retrieval, speed and memory at the same KV budgets", "LIST")
    budgets: str = option("0.25,0.5,0.7", "--budgets", "with --policies: KV budgets as shares of the text (default "
                          "{default})", "LIST")
    speed_tokens: int = option(600, "--speed-tokens", "with --policies: tokens per speed run (default {default}; 0 "
                               "skips the speed runs)", "N", bound=count(0, "tokens"))
    plot: str | None = option(None, "--plot", "save the tok/s and RSS series as a PNG", "PATH")
    json: bool = option(False, "--json")


# --- long generation --------------------------------------------------------
def generate_long(options: LoadOptions, n_tokens: int) -> dict:
    """One long greedy answer; the stats events give the time, token count and RSS series."""
    session = Session.load(options)
    # (wall seconds, completion tokens, RSS MB, CPU seconds): CPU time per token stays
    # readable on a shared machine, where the wall-clock rate follows the neighbours' load.
    points: list[tuple[float, int, float, float]] = []

    def emit(event: dict) -> None:
        if event["ev"] == STATS:
            points.append((time.perf_counter(), event["completion_tokens"], event["rss_mb"], time.process_time()))

    try:
        sampling = SamplingOptions(max_tokens=n_tokens, temperature=0.0, repeat_penalty=1.0, ignore_eos=True)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": REQUEST}]
        done = session.chat(messages, sampling, emit, None)
        points.append((time.perf_counter(), done["completion_tokens"], done["rss_mb"], time.process_time()))
        policy = session.decoder.context_policy
        pauses = list(policy.pauses)
        kv_consistent = session.rt.kv_pos_max() == len(session.decoder.tokens) - 1
    finally:
        session.close()
    return {"done": done, "points": points, "pauses": pauses, "kv_consistent": kv_consistent}


WALL, CPU = 0, 3  # clocks in a point


def time_at(points, n: int, clock: int = WALL) -> float:
    """When the n-th token was out, interpolated between stats events."""
    prev = points[0]
    for point in points:
        if point[1] >= n:
            if point[1] == prev[1]:
                return point[clock]
            return prev[clock] + (point[clock] - prev[clock]) * (n - prev[1]) / (point[1] - prev[1])
        prev = point
    return points[-1][clock]


def rss_at(points, n: int) -> float:
    return next((p[2] for p in points if p[1] >= n), points[-1][2])


def rate(points, a: int, b: int, clock: int = WALL) -> float:
    dt = time_at(points, b, clock) - time_at(points, a, clock)
    return (b - a) / dt if dt > 0 else 0.0


def series(points, n_total: int) -> list[dict]:
    return [{"tokens": b, "tok_s": rate(points, b - BLOCK, b), "rss_mb": rss_at(points, b),
             "tok_per_cpu_s": rate(points, b - BLOCK, b, CPU)}
            for b in range(BLOCK, n_total + 1, BLOCK)]


def summarize(run: dict, ctx: int) -> dict:
    done, points = run["done"], run["points"]
    n = done["completion_tokens"]
    out = {
        "tokens_generated": n,
        "finish_reason": done["finish_reason"],
        "gen_tok_s": done["gen_tok_s"],
        "window": done.get("window"),
        "kv_consistent": run["kv_consistent"],
        "series": series(points, n),
    }
    # None where the run is too short to measure it.
    long_enough = n >= 2 * BLOCK
    out["tok_s_1000_2000"] = rate(points, BLOCK, 2 * BLOCK) if long_enough else None
    out["tok_s_last_1000"] = rate(points, n - BLOCK, n) if long_enough else None
    out["tok_per_cpu_s_1000_2000"] = rate(points, BLOCK, 2 * BLOCK, CPU) if long_enough else None
    out["tok_per_cpu_s_last_1000"] = rate(points, n - BLOCK, n, CPU) if long_enough else None
    out["rss_mb_after_first_ctx"] = rss_at(points, ctx) if n >= ctx else None
    out["rss_mb_end"] = done["rss_mb"]
    if run["pauses"]:
        ms = [p * 1000 for p in run["pauses"]]
        out["pauses"] = {"count": len(ms), "median_ms": statistics.median(ms), "max_ms": max(ms),
                         "total_s": sum(ms) / 1000}
    return out


# --- perplexity ---------------------------------------------------------------
def perplexity(rt: Runtime, tokens: list[int], window: int | None = None, sinks: int = 0, step: int = 16) -> float:
    """Perplexity of `tokens` scored position by position.

    With a window, the cache keeps the first `sinks` tokens and the most recent ones, at most
    `window` in all, shifting positions like the engine's window does; chunks of `step` tokens
    keep it fast (each token sees between window-step and window tokens).
    """
    rt.kv_clear()
    step = step if window else rt.n_batch
    batch = llama_cpp.llama_batch_init(step, 0, 1)
    n_vocab = rt.n_vocab
    nll = 0.0
    scored = 0
    cached = 0
    try:
        for s in range(0, len(tokens) - 1, step):
            part = tokens[s : s + step]
            if window and cached + len(part) > window:
                drop = min(cached + len(part) - window, cached - sinks)
                rt.kv_remove(sinks, sinks + drop)
                rt.kv_shift(sinks + drop, -1, -drop)
                cached -= drop
            fill_batch(batch, part, cached, logits_all=True)
            if llama_cpp.llama_decode(rt.ctx, batch) != 0:
                raise HearthError("llama.cpp failed to evaluate the perplexity text.")
            cached += len(part)
            targets = np.array(tokens[s + 1 : s + 1 + len(part)])
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(rt.ctx), shape=(len(part), n_vocab))
            logits = logits[: len(targets)].astype(np.float64)
            top = logits.max(axis=1)
            lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
            nll += float((lse - logits[np.arange(len(targets)), targets]).sum())
            scored += len(targets)
    finally:
        llama_cpp.llama_batch_free(batch)
    return float(np.exp(nll / scored))


def perplexities(options: LoadOptions, n_tokens: int, window: int, sinks: int) -> dict:
    extra = bool(extra_bufts_decision(options.model_path).get("ok"))
    rt = Runtime(LoadOptions(model_path=options.model_path, n_ctx=n_tokens + 64, n_batch=512,
                             n_threads=options.n_threads, n_gpu_layers=options.n_gpu_layers), extra_bufts=extra)
    try:
        tokens = rt.tokenize(long_text(), add_special=rt.add_bos())[:n_tokens]
        return {
            "ppl_text": f"pydoc_data.topics, first {len(tokens)} tokens",
            "ppl_window": window,
            "ppl_full": perplexity(rt, tokens),
            "ppl_window_sinks": perplexity(rt, tokens, window, sinks),
            "ppl_window_nosinks": perplexity(rt, tokens, window, 0),
        }
    finally:
        rt.close()


# --- report -------------------------------------------------------------------
def run(args: WindowOptions, plot: Callable[[str, dict], None] | None = None) -> int:
    """The report on stdout (progress on stderr with --json); plot(path, result) draws the --plot chart (the
    command line passes the Qt painter from app/ui/bench/window_plot.py)."""
    path = check_model_file(args.model)
    threads = args.threads
    base = LoadOptions(model_path=str(path), n_ctx=args.ctx, n_threads=threads,
                       n_gpu_layers=args.gpu_layers, sink_tokens=args.sinks)
    # With --json, the progress and series go to stderr: a long run shows it is alive.
    say = functools.partial(print, file=sys.stderr, flush=True) if args.json else print
    result: dict = {"ctx": args.ctx, "model": path.name, "threads": threads}
    if args.policies is not None:
        return run_policies(args, base, say)

    say(f"window: generating {args.tokens} tokens in a {args.ctx}-token context ...")
    base.context_policy = "window"
    win = summarize(generate_long(base, args.tokens), args.ctx)
    result.update({k: v for k, v in win.items() if k != "window"})
    result["shifts"] = (win["window"] or {}).get("shifts", 0)
    result["window_state"] = win["window"]
    first = win["rss_mb_after_first_ctx"]
    result["rss_change"] = win["rss_mb_end"] / first - 1 if first else None
    result["rate_ratio"] = win["tok_s_last_1000"] / win["tok_s_1000_2000"] if win["tok_s_1000_2000"] else None
    cpu_first = win["tok_per_cpu_s_1000_2000"]
    result["cpu_rate_ratio"] = win["tok_per_cpu_s_last_1000"] / cpu_first if cpu_first else None
    _print_series(say, win)

    n_compare = args.tokens if args.compare_tokens is None else args.compare_tokens
    if n_compare > 0:
        say(f"truncate-middle: generating {n_compare} tokens in the same context ...")
        base.context_policy = "truncate-middle"
        result["truncate_middle"] = summarize(generate_long(base, n_compare), args.ctx)
        _print_series(say, result["truncate_middle"])

    say(f"perplexity: {args.ppl_tokens} tokens, window {args.ppl_window} ...")
    result.update(perplexities(base, args.ppl_tokens, args.ppl_window, args.sinks))

    if args.plot:
        if plot is None:
            raise HearthError("This build of Hearth cannot draw charts.")
        plot(args.plot, result)
        result["plot"] = args.plot
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_summary(result, args.sinks)
    return 0


def run_policies(args: WindowOptions, base: LoadOptions, say) -> int:
    from app.bench import window_policies as wp

    policies = wp.check_policies([p.strip() for p in args.policies.split(",") if p.strip()])
    budgets = wp.check_budgets(args.budgets)
    base.extra_bufts = bool(extra_bufts_decision(base.model_path).get("ok"))
    say(f"policies {', '.join(policies)} at budgets {', '.join(f'{b:.0%}' for b in budgets)} ...")
    result = {"model": base.model_path, "threads": args.threads,
              "quality": wp.compare(base, None, policies, budgets, args.ppl_tokens, args.ppl_tokens // 2,
                                    args.sinks, say)}
    if args.speed_tokens > 0 and any(p in policies for p in ("window", "h2o")):
        ctx = max(256, int(args.ctx * budgets[0]))
        say(f"speed: {args.speed_tokens} tokens in a {ctx}-token context ...")
        result["speed"] = wp.speed(base, ctx, args.speed_tokens, say=say)
    print(json.dumps(result, indent=2) if args.json else wp.table(result))
    return 0


def _print_series(say, run: dict) -> None:
    say("   tokens    tok/s   RSS MB   tok/CPU-s")
    for row in run["series"]:
        say(f"  {row['tokens']:7d}  {row['tok_s']:7.1f}  {row['rss_mb']:7.1f}  {row['tok_per_cpu_s']:9.1f}")
    if "pauses" in run:
        p = run["pauses"]
        say(f"  pauses: {p['count']}, median {p['median_ms']:.0f} ms, longest {p['max_ms']:.0f} ms, "
            f"{p['total_s']:.1f} s in all")


def _print_summary(r: dict, sinks: int) -> None:
    print(f"\nwindow, ctx {r['ctx']}: {r['tokens_generated']} tokens ({r['finish_reason']}), "
          f"{r['shifts']} shifts, KV cache and token history agree: {r['kv_consistent']}")
    if r["rss_change"] is not None:
        print(f"  RSS after the first {r['ctx']} tokens {r['rss_mb_after_first_ctx']:.1f} MB, at the end "
              f"{r['rss_mb_end']:.1f} MB ({r['rss_change']:+.2%}; goal within 2%)")
    if r["rate_ratio"] is not None:
        print(f"  tok/s tokens 1000-2000 {r['tok_s_1000_2000']:.1f}, last 1000 {r['tok_s_last_1000']:.1f} "
              f"(ratio {r['rate_ratio']:.2f}; goal at least 0.90); per CPU-second {r['tok_per_cpu_s_1000_2000']:.1f} "
              f"and {r['tok_per_cpu_s_last_1000']:.1f} (ratio {r['cpu_rate_ratio']:.2f})")
    tm = r.get("truncate_middle")
    if tm:
        line = f"truncate-middle: {tm['gen_tok_s']:.1f} tok/s overall vs window {r['gen_tok_s']:.1f}"
        if "pauses" in tm:
            p = tm["pauses"]
            line += f"; {p['count']} pauses, median {p['median_ms']:.0f} ms, longest {p['max_ms']:.0f} ms"
        print(line)
    print(f"perplexity on {r['ppl_text']}: full cache {r['ppl_full']:.2f}, window {r['ppl_window']} with "
          f"{sinks} sinks {r['ppl_window_sinks']:.2f}, with 0 sinks {r['ppl_window_nosinks']:.2f}")
