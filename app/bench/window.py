"""`hearth bench window`: endless generation in a fixed context, and the attention-sink effect.

1. Generates --tokens tokens (default 20,000) in a --ctx context (default 1,024) under the
   `window` policy: the run must finish, memory must stay flat (RSS at the end vs after the
   first ctx tokens) and speed must stay flat (tok/s over the last 1,000 tokens vs tokens
   1,000-2,000). The tok/s and RSS series are printed, and plotted with --plot.
2. The same run under `truncate-middle`, which evaluates the recent part again each time
   the context is full: its pauses are printed.
3. StreamingLLM's perplexity experiment on a long text that ships with Python: full cache,
   a window of W tokens with 4 sinks, and the same window with no sinks.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time

import llama_cpp
import numpy as np

from app.commands.options import add_model_args, model_path
from app.core.errors import HearthError
from app.core.modelfile import check_model_file
from app.engine.decode import fill_batch
from app.engine.probe import extra_bufts_decision
from app.engine.protocol import STATS, LoadOptions, SamplingOptions
from app.engine.runtime import Runtime
from app.engine.session import Session

BLOCK = 1000  # tokens per point of the tok/s and RSS series
SYSTEM = "You are a storyteller who never stops."
REQUEST = "Tell me an endless story about a lighthouse keeper and the sea."


def register(kinds) -> None:
    p = kinds.add_parser("window", help="StreamingLLM window: flat memory and speed over a long generation",
                         description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    for action in p._actions:  # also accepted before `window`; don't let the defaults here undo those
        if action.dest in ("model", "threads", "gpu_layers"):
            action.default = argparse.SUPPRESS
    p.add_argument("--tokens", type=int, default=20000, metavar="N", help="tokens to generate (default 20000)")
    p.add_argument("--ctx", type=int, default=1024, metavar="N", help="context size (default 1024)")
    p.add_argument("--compare-tokens", type=int, metavar="N",
                   help="tokens for the truncate-middle run (default: --tokens; 0 skips it)")
    p.add_argument("--ppl-tokens", type=int, default=3000, metavar="N", help="text length for perplexity (default 3000)")
    p.add_argument("--ppl-window", type=int, default=256, metavar="W", help="window for perplexity (default 256)")
    p.add_argument("--sinks", type=int, default=4, metavar="N", help="attention sinks (default 4)")
    p.add_argument("--plot", metavar="PATH", help="save the tok/s and RSS series as a PNG")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


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
def long_text() -> str:
    """Prose that ships with every Python: the reference manual's pages behind help()."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in ("compound", "specialnames", "types"))


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
def run(args) -> int:
    path = check_model_file(model_path(args))
    threads = getattr(args, "threads", None)
    base = LoadOptions(model_path=str(path), n_ctx=args.ctx, n_threads=threads,
                       n_gpu_layers=getattr(args, "gpu_layers", 0), sink_tokens=args.sinks)
    # With --json, the progress and series go to stderr: a long run shows it is alive.
    say = functools.partial(print, file=sys.stderr, flush=True) if args.json else print
    result: dict = {"ctx": args.ctx, "model": path.name, "threads": threads}

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
        save_plot(args.plot, result)
        result["plot"] = args.plot
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_summary(result, args.sinks)
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


def save_plot(path: str, result: dict) -> None:
    """Two panels, tok/s and RSS over tokens generated, drawn with Qt (already a dependency)."""
    from PySide6.QtCore import QPointF, QRectF
    from PySide6.QtGui import QColor, QPen

    from app.bench.canvas import white_canvas

    width, height = 900, 560
    image, painter, _app = white_canvas(width, height)
    runs = [("window", result["series"], QColor("#1f77b4"))]
    if result.get("truncate_middle"):
        runs.append(("truncate-middle", result["truncate_middle"]["series"], QColor("#d62728")))
    panels = [("tok/s per 1000 tokens", "tok_s"), ("RSS (MB)", "rss_mb")]
    for index, (title, key) in enumerate(panels):
        box = QRectF(70, 40 + index * 260, width - 100, 200)
        values = [row[key] for _, rows, _ in runs for row in rows] or [0.0]
        top = max(values) * (1.1 if key == "tok_s" else 1.02) or 1.0
        bottom = 0.0 if key == "tok_s" else min(values) * 0.98
        n_max = max((rows[-1]["tokens"] for _, rows, _ in runs if rows), default=1)
        painter.setPen(QPen(QColor("black")))
        painter.drawRect(box)
        painter.drawText(QPointF(box.left(), box.top() - 8), f"{title}, ctx {result['ctx']}")
        painter.drawText(QPointF(box.left() - 60, box.top() + 12), f"{top:.0f}")
        painter.drawText(QPointF(box.left() - 60, box.bottom()), f"{bottom:.0f}")
        painter.drawText(QPointF(box.right() - 60, box.bottom() + 16), f"{n_max} tokens")
        for slot, (name, rows, color) in enumerate(runs):
            painter.setPen(QPen(color, 2))
            points = [QPointF(box.left() + box.width() * row["tokens"] / n_max,
                              box.bottom() - box.height() * (row[key] - bottom) / ((top - bottom) or 1.0))
                      for row in rows]
            for a, b in zip(points, points[1:]):
                painter.drawLine(a, b)
            painter.drawText(QPointF(box.left() + 10 + 160 * slot, box.top() + 16), name)
    painter.end()
    if not image.save(path, "PNG"):
        raise HearthError(f"Could not write the plot to {path}.")
