"""`hearth bench window --policies full,window,h2o`: the context policies side by side at the same KV budgets.

For each budget (a share of the text: 25%, 50% and 70% by default), every policy scores the same text with at
most that many KV cells in use:
- perplexity on a long text (the Python reference pages that ship with Python);
- a retrieval probe: facts stated early in a long text and asked for at its end, after the window has moved past
  them; scored by whether greedy decoding would give each answer (every answer token the top one) and by the
  answers' mean log-probability;
- speed per generated token in the engine's own loop (Session, the same code the engine process runs) at a context
  of the budget, against the window policy, with and without flash attention (h2o needs it off);
- memory: the KV cells (and bytes) at the peak, the same for every policy by construction.

How the cache is kept at a budget B, in steps of STEP tokens: `window` drops the oldest tokens after the sinks and
shifts the rest (StreamingLLM); `h2o` keeps the sinks, the most recent half of what stays and the best-scored other
half (the Heavy-Hitter Oracle's split), scores read from the attention of every LAYER_STRIDE-th layer as the
engine's policy reads them; both then hold B - STEP tokens before a step and B after it. `full` keeps everything.
All three run on one context with flash attention off, so the kernels are the same.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import llama_cpp
import numpy as np

from app.core.errors import HearthError
from app.engine.context.attention_scores import LAYER_STRIDE, AttentionScores
from app.engine.decoding.decode import fill_batch
from app.engine.context.h2o import choose_evicted, evict
from app.protocol.messages import LoadOptions, SamplingOptions, STATS
from app.engine.decoding.runtime import Runtime

POLICIES = ("full", "window", "h2o")
BUDGETS = (0.25, 0.5, 0.7)
STEP = 16
RECENT_SHARE = 0.5  # of the tokens h2o keeps after the sinks: H2O's half recent, half heavy hitters

FACTS = [("Anna", "4821"), ("Boris", "7356"), ("Clara", "2690"), ("David", "5173")]
FACT_DEPTHS = (0.02, 0.2, 0.4, 0.6)  # where in the filler each fact is stated


def check_policies(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise HearthError(f"--policies takes a comma-separated list of {', '.join(POLICIES)}; "
                          f"{', '.join(unknown) or 'nothing'} is not one.")
    return names


def check_budgets(text: str) -> list[float]:
    try:
        budgets = [float(b) for b in text.split(",") if b.strip()]
    except ValueError:
        budgets = []
    if not budgets or not all(0.05 <= b < 1 for b in budgets):
        raise HearthError(f"--budgets takes shares of the text between 0.05 and 1 (0.25,0.5,0.7), not {text!r}.")
    return budgets


def table(result: dict) -> str:
    """The report: one row per policy and budget, then the speed runs."""
    q = result["quality"]
    lines = [f"perplexity on {q['ppl_tokens']} tokens, retrieval of {len(FACTS)} facts in {q['probe_tokens']} tokens; "
             f"h2o reads {q['layers_read']} layers (a stride of {q['layer_stride']}); {q['sinks']} sinks, steps of {q['step']}",
             "| budget | policy | KV cells (MB) | perplexity | vs full | retrieved | answer log-p |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    full = next((r["ppl"] for r in q["rows"] if r["policy"] == "full"), None)
    for r in q["rows"]:
        rel = f"{r['ppl'] / full - 1:+.1%}" if full else ""
        cells = "all" if r["policy"] == "full" else f"{r['ppl_cells']} ({r['kv_mb']:.1f})"
        lines.append(f"| {r['budget']:.0%} | {r['policy']} | {cells} | {r['ppl']:.3f} | {rel} | "
                     f"{r['probe_found']}/{r['probe_of']} | {r['probe_logp']:.2f} |")
    sp = result.get("speed")
    if sp:
        lines += ["", f"speed, {sp['tokens']} tokens in a {sp['ctx']}-token context (median of {sp['repeats']}):",
                  "| policy | tok/s | tok/CPU-s | runs (tok/s, tok/CPU-s) |", "| --- | --- | --- | --- |"]
        for kind, k in sp["kinds"].items():
            lines.append(f"| {kind} | {k['tok_s']:.1f} | {k['tok_per_cpu_s']:.1f} | {k['runs']} |")
    return "\n".join(lines)


# --- the cache at a budget -----------------------------------------------------------------------------------
def score_tokens(rt: Runtime, tokens: list[int], policy: str, budget: int, sinks: int, step: int = STEP,
                 recent_share: float = RECENT_SHARE) -> np.ndarray:
    """The negative log-likelihood of each of tokens[1:] given what the policy keeps of the ones before it (and
    whether it was the top choice: column 1)."""
    rt.kv_clear()
    held: list[int] = []  # what the cache holds, in position order (h2o's evict keeps it so)
    step = step if policy != "full" else rt.n_batch
    batch = llama_cpp.llama_batch_init(step, 0, 1)
    n_vocab = rt.n_vocab
    out = np.zeros((len(tokens) - 1, 2))
    try:
        for s in range(0, len(tokens) - 1, step):
            part = tokens[s : s + step]
            if policy != "full" and len(held) + len(part) > budget:
                if policy == "window":
                    drop = min(len(held) + len(part) - budget, len(held) - sinks)
                    rt.kv_remove(sinks, sinks + drop)
                    rt.kv_shift(sinks + drop, -1, -drop)
                    del held[sinks : sinks + drop]
                else:
                    keep = budget - len(part)
                    n_recent = int(round((keep - sinks) * recent_share))
                    evicted = choose_evicted(rt.attention.by_position(len(held)), sinks, n_recent,
                                             keep - sinks - n_recent)
                    evict(rt, 0, held, evicted)
            fill_batch(batch, part, len(held), logits_all=True)
            if llama_cpp.llama_decode(rt.ctx, batch) != 0:
                raise HearthError("llama.cpp failed to evaluate the benchmark text.")
            if rt.attention is not None:
                rt.attention.raise_error()
            held += part
            targets = np.array(tokens[s + 1 : s + 1 + len(part)])
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(rt.ctx), shape=(len(part), n_vocab))
            logits = logits[: len(targets)].astype(np.float64)
            top = logits.max(axis=1)
            lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
            rows = np.arange(len(targets))
            out[s : s + len(targets), 0] = lse - logits[rows, targets]
            out[s : s + len(targets), 1] = logits.argmax(axis=1) == targets
    finally:
        llama_cpp.llama_batch_free(batch)
    return out


def kv_bytes_per_cell(rt: Runtime, tokens: list[int]) -> float:
    """Bytes a KV cell takes, from llama.cpp's own state size of a few cells (K and V of every layer)."""
    rt.kv_clear()
    batch = llama_cpp.llama_batch_init(64, 0, 1)
    try:
        fill_batch(batch, tokens[:64], 0)
        llama_cpp.llama_decode(rt.ctx, batch)
        big = llama_cpp.llama_state_seq_get_size(rt.ctx, 0)
        rt.kv_remove(32, -1)
        small = llama_cpp.llama_state_seq_get_size(rt.ctx, 0)
    finally:
        llama_cpp.llama_batch_free(batch)
    return (big - small) / 32


# --- the texts --------------------------------------------------------------------------------------------------
def probe_text(rt: Runtime, filler: list[int], n_filler: int) -> tuple[list[int], list[tuple[int, int]]]:
    """Facts inside n_filler tokens of filler, then the questions answered: the tokens, and the [start, end)
    spans of the answers' tokens (what is scored)."""
    tok = lambda text: rt.tokenize(text, add_special=False, parse_special=False)  # noqa: E731
    out = rt.tokenize("Remember these facts.\n", add_special=rt.add_bos())
    at = 0
    for (name, number), depth in zip(FACTS, FACT_DEPTHS):
        cut = int(n_filler * depth)
        out += filler[at:cut] + tok(f"\nThe secret number of {name} is {number}.\n")
        at = cut
    out += filler[at:n_filler] + tok("\n\nQuestions.\n")
    spans = []
    for name, number in FACTS:
        out += tok(f"The secret number of {name} is")
        answer = tok(f" {number}")
        spans.append((len(out), len(out) + len(answer)))
        out += answer + tok(".\n")
    return out, spans


# --- the runs ---------------------------------------------------------------------------------------------------
def compare(options: LoadOptions, text_tokens: list[int] | None, policies: list[str], budgets=BUDGETS,
            n_ppl: int = 2000, n_probe: int = 1200, sinks: int = 4, say: Callable[[str], None] = print,
            recent_share: float = RECENT_SHARE) -> dict:
    """Perplexity and the retrieval probe of each policy at each budget (one context, flash attention off)."""
    from app.bench.window_texts import long_text

    n_ctx = max(n_ppl, n_probe + 128) + 64
    attention = AttentionScores(n_ctx)
    rt = Runtime(LoadOptions(model_path=options.model_path, n_ctx=n_ctx, n_batch=512, n_threads=options.n_threads,
                             n_gpu_layers=options.n_gpu_layers, flash_attn="off"),
                 extra_bufts=options.extra_bufts is not False, attention=attention)
    try:
        filler = text_tokens or rt.tokenize(long_text(), add_special=False)
        ppl_tokens = rt.tokenize(long_text(), add_special=rt.add_bos())[:n_ppl] if text_tokens is None \
            else text_tokens[:n_ppl]
        probe, spans = probe_text(rt, filler[5000:] if len(filler) > 5000 + n_probe else filler, n_probe)
        per_cell = kv_bytes_per_cell(rt, ppl_tokens)
        rows = []
        for share in budgets:
            for policy in policies:
                if policy == "full" and rows and any(r["policy"] == "full" for r in rows):
                    full = next(r for r in rows if r["policy"] == "full")
                    rows.append({**full, "budget": share})  # the full cache does not depend on the budget
                    continue
                started = time.perf_counter()
                budget_ppl = int(len(ppl_tokens) * share) if policy != "full" else len(ppl_tokens)
                scored = score_tokens(rt, ppl_tokens, policy, budget_ppl, sinks, recent_share=recent_share)
                budget_probe = int(len(probe) * share) if policy != "full" else len(probe)
                answers = score_tokens(rt, probe, policy, budget_probe, sinks, recent_share=recent_share)
                found = [bool(answers[a - 1 : b - 1, 1].all()) for a, b in spans]
                logp = [float(-answers[a - 1 : b - 1, 0].mean()) for a, b in spans]
                row = {"policy": policy, "budget": share, "ppl": float(np.exp(scored[:, 0].mean())),
                       "ppl_cells": budget_ppl, "kv_mb": budget_ppl * per_cell / 2**20,
                       "probe_found": sum(found), "probe_of": len(found), "probe_found_each": found,
                       "probe_logp": statistics.mean(logp), "probe_cells": budget_probe,
                       "seconds": round(time.perf_counter() - started, 1)}
                rows.append(row)
                say(f"  {policy:6s} budget {share:.0%}: perplexity {row['ppl']:.3f}, retrieval "
                    f"{row['probe_found']}/{row['probe_of']} (mean log-p {row['probe_logp']:.2f}), "
                    f"{row['seconds']} s")
        return {"ppl_tokens": len(ppl_tokens), "probe_tokens": len(probe), "layer_stride": attention.stride,
                "layers_read": len(attention.layers), "kv_bytes_per_cell": per_cell, "sinks": sinks, "step": STEP,
                "recent_share": recent_share,
                "rows": rows}
    finally:
        rt.close()


def speed(options: LoadOptions, ctx: int, n_tokens: int, repeats: int = 2, say: Callable[[str], None] = print) -> dict:
    """Generated tok/s (wall and per CPU-second) of window with flash attention as loaded by default, window with it
    off and h2o (off by necessity), at the same context, runs interleaved so that the machine's load falls on all."""
    from app.bench.window_texts import REQUEST, SYSTEM
    from app.engine.process.session import Session

    kinds = {"window (flash auto)": dict(context_policy="window"),
             "window (flash off)": dict(context_policy="window", flash_attn="off"),
             "h2o": dict(context_policy="h2o")}
    got: dict[str, list[tuple[float, float, dict]]] = {k: [] for k in kinds}
    sampling = SamplingOptions(max_tokens=n_tokens, temperature=0.0, repeat_penalty=1.0, ignore_eos=True)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": REQUEST}]
    for _ in range(repeats):
        for kind, extra in kinds.items():
            load = LoadOptions(model_path=options.model_path, n_ctx=ctx, n_threads=options.n_threads,
                               n_gpu_layers=options.n_gpu_layers, extra_bufts=options.extra_bufts, **extra)
            session = Session.load(load)
            marks: list[tuple[float, float, int]] = []

            def emit(event: dict) -> None:
                if event["ev"] == STATS and event.get("completion_tokens"):
                    marks.append((time.perf_counter(), time.process_time(), event["completion_tokens"]))

            try:
                done = session.chat(messages, sampling, emit, None)
            finally:
                session.close()
            end = (time.perf_counter(), time.process_time(), done["completion_tokens"])
            first = marks[0] if marks else end
            n = end[2] - first[2]
            wall = n / (end[0] - first[0]) if end[0] > first[0] else 0.0
            cpu = n / (end[1] - first[1]) if end[1] > first[1] else 0.0
            got[kind].append((wall, cpu, done.get("window") or {}))
            say(f"  {kind:20s} {wall:6.1f} tok/s, {cpu:6.1f} tok/CPU-s, "
                f"{(done.get('window') or {}).get('shifts', 0)} evictions/shifts")
    out = {}
    for kind, runs in got.items():
        out[kind] = {"tok_s": statistics.median(r[0] for r in runs), "tok_per_cpu_s": statistics.median(r[1] for r in runs),
                     "runs": [[round(r[0], 1), round(r[1], 1)] for r in runs], "window": runs[-1][2]}
    return {"ctx": ctx, "tokens": n_tokens, "repeats": repeats, "kinds": out}
