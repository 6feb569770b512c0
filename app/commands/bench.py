"""`hearth bench [spec|window|matrix|quality|compare|serve|contention|gui|docs|media]`: speed measured side by side,
printed as ratios.

The measuring is app/bench (headless, Qt-free) and, for `gui`, app/ui/bench; this module owns the command
line: it builds the parsers, turns the flags into each benchmark's options, and hands the charts that need
Qt (--plot) to app/ui/bench.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import fields

from app.core import env
from app.bench import compare, contention, matrix, matrix_plan, serve, spec, window
from app.bench.basic import BasicOptions
from app.commands.options import SECONDS, add_model_args, at_least, model_path, within
from app.protocol.option_fields import accepted


CONTEXT, SLOTS = accepted("n_ctx"), accepted("n_parallel")  # as LoadOptions declares them
CONTEXT_TAKES = f"a context of {CONTEXT[0]:g} to {CONTEXT[1]:,.0f} tokens"
# Each benchmark's numbers have their ranges on their flags (options.within): 0 or -5 tokens ran a benchmark of one
# token; 0 repeats printed medians of none.


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure speed: pp512, tg128, Python overhead, ratio vs Llama.generate()",
                       description="Without a subcommand: prompt processing (512 tokens) and generation "
                       "(128 tokens) as llama-bench defines them, the decode loop's overhead per token, "
                       "and the ratio against llama-cpp-python's Llama.generate() on the same model.")
    add_model_args(p)
    p.add_argument("--repeats", type=int, default=5, metavar="N", help="runs per figure; medians are reported",
                   **at_least(1, "runs"))
    p.add_argument("--json", action="store_true")
    p.add_argument("--endpoint", metavar="URL", help="measure a remote OpenAI-compatible server instead (its /v1 "
                   "base URL): time to first token and generation speed; --model names its model")
    p.add_argument("--api-key", metavar="KEY", default=env.API_KEY.get(),
                   help="with --endpoint: the server's API key (default: $HEARTH_API_KEY)")
    p.set_defaults(func=_run_basic)
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND")
    for add in (_add_spec, _add_window, _add_matrix, _add_quality, _add_compare, _add_serve, _add_contention, _add_gui,
                _add_docs, _add_media):
        add(kinds)
    for parser in (p, *kinds.choices.values()):
        parser.set_defaults(func=_errors_only(parser.get_default("func")))


def _errors_only(run):
    """Benchmarks run llama.cpp in this process, in the user's terminal: only its errors are printed there."""
    def quiet_run(args) -> int:
        from app.engine.process import llamalog

        llamalog.errors_only()
        return run(args)

    return quiet_run


def _options(cls, args: argparse.Namespace, **given):
    """The benchmark's options from the flags of the same names; flags left unset keep the class's defaults."""
    values = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
    return cls(**{**values, **given})


# --- hearth bench ----------------------------------------------------------------------------------------------
def _run_basic(args) -> int:
    if args.endpoint:
        return serve.run_endpoint(args.endpoint, args.api_key, args.model, args.repeats, 128, args.json)
    from app.bench.basic import run

    return run(_options(BasicOptions, args, model=model_path(args)))


# --- hearth bench spec -----------------------------------------------------------------------------------------
def _add_spec(kinds) -> None:
    p = kinds.add_parser("spec", help="speculative decoding: plain vs lookup vs draft model vs a prediction",
                         description="Greedy decoding of the same prompts with no drafter, prompt lookup, a draft "
                         "model (the bundled model in Q4_0), a right prediction (the plain answer) and a wrong one "
                         "(another prompt's answer), and llama-cpp-python's LlamaPromptLookupDecoding, for each "
                         "quantization of the target; medians and ratios against plain decoding, and whether each "
                         "answer equals plain decoding's (at a difference, plain's top-two logit gap there). Rows "
                         "print as they complete.")
    add_model_args(p)
    p.add_argument("--quants", default=",".join(spec.QUANTS), help="target quantizations (comma-separated)")
    p.add_argument("--draft-model", "--draft", dest="draft", metavar="PATH",
                   help="draft model (default: the bundled model in Q4_0)")
    p.add_argument("--max-tokens", type=int, default=300, metavar="N", **at_least(1, "tokens"))
    p.add_argument("--llama-tokens", type=int, default=spec.LLAMA_TOKENS, metavar="N",
                   help="tokens per llama-cpp-python lookup run (it is slow; its rate is per token all the same)",
                   **at_least(1, "tokens"))
    p.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per figure; medians are reported",
                   **at_least(1, "runs"))
    p.add_argument("--no-llama", action="store_true", help="skip llama-cpp-python's prompt lookup")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure the kept speculation costs of each model again (hearth doctor shows them)")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout (rows go to stderr)")
    p.set_defaults(func=lambda args: spec.run(_options(spec.SpecOptions, args, model=model_path(args))))


# --- hearth bench window ---------------------------------------------------------------------------------------
def _add_window(kinds) -> None:
    p = kinds.add_parser("window", help="StreamingLLM window: flat memory and speed over a long generation",
                         description=window.__doc__.split("\n\n", 1)[1],
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    for action in p._actions:  # also accepted before `window`; don't let the defaults here undo those
        if action.dest in ("model", "threads", "gpu_layers"):
            action.default = argparse.SUPPRESS
    p.add_argument("--tokens", type=int, default=20000, metavar="N", help="tokens to generate (default 20000)",
                   **at_least(1, "tokens"))
    p.add_argument("--ctx", type=int, default=1024, metavar="N", help="context size (default 1024)",
                   **within(*CONTEXT, takes=CONTEXT_TAKES))
    p.add_argument("--compare-tokens", type=int, metavar="N",
                   help="tokens for the truncate-middle run (default: --tokens; 0 skips it)", **at_least(0, "tokens"))
    p.add_argument("--ppl-tokens", type=int, default=3000, metavar="N",
                   help="text length for perplexity (default 3000)",
                   **at_least(2, "tokens"))
    p.add_argument("--ppl-window", type=int, default=256, metavar="W", help="window for perplexity (default 256)",
                   **within(2, takes="a window of 2 or more tokens"))
    p.add_argument("--sinks", type=int, default=4, metavar="N", help="attention sinks (default 4)",
                   **at_least(0, "sink tokens"))
    p.add_argument("--policies", metavar="LIST",
                   help="compare context policies instead (full,window,h2o): perplexity, retrieval, speed and memory "
                        "at the same KV budgets")
    p.add_argument("--budgets", default="0.25,0.5,0.7", metavar="LIST",
                   help="with --policies: KV budgets as shares of the text (default 0.25,0.5,0.7)")
    p.add_argument("--speed-tokens", type=int, default=600, metavar="N",
                   help="with --policies: tokens per speed run (default 600; 0 skips the speed runs)",
                   **at_least(0, "tokens"))
    p.add_argument("--plot", metavar="PATH", help="save the tok/s and RSS series as a PNG")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run_window)


def _run_window(args) -> int:
    def plot(path: str, result: dict) -> None:
        from app.ui.bench.window_plot import save_plot

        save_plot(path, result)

    return window.run(_options(window.WindowOptions, args, model=model_path(args)), plot)


# --- hearth bench matrix ---------------------------------------------------------------------------------------
def _add_matrix(kinds) -> None:
    p = kinds.add_parser("matrix", help="F16 / INT8 / INT4 / +speculative / combined, on this machine",
                         description=matrix.__doc__.split("\n\n", 1)[1],
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", metavar="PATH|NAME", default=argparse.SUPPRESS,
                   help="GGUF file or library name (default: the bundled model)")
    p.add_argument("--threads", type=int, metavar="N", default=argparse.SUPPRESS,
                   help="CPU threads (default: physical cores)")
    p.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per figure (default 3)",
                   **at_least(1, "runs"))
    p.add_argument("--quick", action="store_true", help="short answers and one run each: a first look")
    p.add_argument("--draft-model", metavar="PATH|NAME", help="also try this draft model in the speculative rows")
    p.add_argument("--rows", metavar="ID,...",
                   help=f"only these configurations ({', '.join(r['id'] for r in matrix_plan.ROWS)})")
    p.add_argument("--set", action="append", default=[], metavar="ROW.KEY=VALUE", dest="settings",
                   help="change a configuration, e.g. combined.kv_type=q4_0 (keys: qtype, kv_type, flash_attn)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="stop a configuration after S seconds and mark it failed (default 600)", **SECONDS)
    p.add_argument("--no-interleave", dest="interleave", action="store_false",
                   help="run each configuration's repeats in one process instead of in rounds over all of them "
                   "(fewer model loads, for big models; less fair when other programs run)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--csv", metavar="PATH", help="also write the table as CSV")
    p.add_argument("--plot", metavar="PATH", help="also write a bar chart PNG")
    p.add_argument("--no-save", action="store_true", help="do not keep the result under the data folder's bench/")
    p.add_argument("--quality-text", metavar="FILE", default=None,
                   help="score the quality columns (mean KLD, same top token against F16) on this text instead of "
                   "the built-in one")
    p.add_argument("--no-quality", action="store_true", help="leave out the quality columns")
    p.set_defaults(func=_run_matrix)


def _run_matrix(args) -> int:
    def plot(result: dict, path: str) -> None:
        from app.ui.bench.matrix_plot import save_plot

        save_plot(result, path)

    return matrix.run(_options(matrix_plan.MatrixOptions, args), plot)


# --- hearth bench quality ---------------------------------------------------------------------------------------
def _add_quality(kinds) -> None:
    from app.bench import quality

    p = kinds.add_parser("quality", help="what each quant costs in quality against its base, on your own text",
                         description=quality.__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", required=True, metavar="FILE", help="the text to score (your own writing, code, chats)")
    p.add_argument("--model", metavar="PATH|NAME", default=None,
                   help="the base: an F16/BF16 file or library name (default: the bundled model's F16 copy)")
    p.add_argument("--quants", metavar="TYPE,...", default=",".join(quality.DEFAULT_QUANTS),
                   type=lambda value: [q.strip().upper() for q in value.split(",") if q.strip()],
                   help=f"the types to measure (default {','.join(quality.DEFAULT_QUANTS)})")
    p.add_argument("--ctx", type=int, default=256, metavar="N", help="tokens per scored chunk (default 256)",
                   **within(*CONTEXT, takes=CONTEXT_TAKES))
    p.add_argument("--imatrix", metavar="FILE", default=None,
                   help="an importance matrix (hearth models imatrix): each type measured without and with it")
    p.add_argument("--kv-types", metavar="TYPE,...", default=[],
                   type=lambda value: [t.strip().lower() for t in value.split(",") if t.strip()],
                   help="also score these KV cache types (f16, q8_0, q4_0): the base with each against the base "
                   "with an F16 cache, on a long context, beside the weights' rows (--quants \"\" for the cache alone)")
    p.add_argument("--kv-ctx", type=int, metavar="N", default=None,
                   help=f"the context for the KV rows (default: the longest of "
                   f"{', '.join(map(str, quality.KV_CONTEXTS))} that the text fills)",
                   **within(*CONTEXT, takes=CONTEXT_TAKES))
    p.add_argument("--threads", type=int, metavar="N", default=None, help="CPU threads (default: physical cores)",
                   **at_least(1, "threads"))
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--plot", metavar="PATH", help="also write a chart PNG: file size against mean KLD (log scale), "
                   "one point per quant, without and with the matrix")
    p.add_argument("--no-save", action="store_true", help="do not keep the figures in the data folder's "
                   "bench/quality.json, where the window's quantize pane reads them")
    p.set_defaults(func=_run_quality)


def _run_quality(args) -> int:
    from app.bench import quality

    def plot(result: dict, path: str) -> None:
        from app.ui.bench.quality_plot import save_plot

        save_plot(result, path)

    return quality.run(_options(quality.QualityOptions, args), plot)


# --- hearth bench compare --------------------------------------------------------------------------------------
def _add_compare(kinds) -> None:
    p = kinds.add_parser("compare", help="two saved `bench matrix` results side by side",
                         description=compare.__doc__.split("\n\n", 1)[1])
    p.add_argument("a", metavar="A.json")
    p.add_argument("b", metavar="B.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lambda args: compare.run(_options(compare.CompareOptions, args)))


# --- hearth bench gui ------------------------------------------------------------------------------------------
# --- hearth bench serve ----------------------------------------------------------------------------------------
def _add_serve(kinds) -> None:
    p = kinds.add_parser("serve", help="the API server under concurrent load: N streams against one, "
                         "side by side with other servers",
                         description=serve.__doc__.split("\n\n", 1)[1])
    add_model_args(p)
    p.add_argument("--parallel", type=int, default=4, metavar="N",
                   help="concurrent streams and Hearth's slots (default 4)",
                   **within(2, SLOTS[1],
                            takes=f"2 to {SLOTS[1]:g} streams (the benchmark compares N streams with one)"))
    p.add_argument("--requests", type=int, default=3, metavar="R", help="answers per stream in each phase (default 3)",
                   **at_least(1, "requests"))
    p.add_argument("--max-tokens", type=int, default=128, metavar="N", help="tokens per answer (default 128)",
                   **at_least(1, "tokens"))
    p.add_argument("--ctx", type=int, default=2048, metavar="N", help="Hearth's context per slot (default 2048)",
                   **within(*CONTEXT, takes=CONTEXT_TAKES))
    p.add_argument("--rounds", type=int, default=1, metavar="R",
                   help="the servers take turns R times; the table shows medians (default 1)", **at_least(1, "rounds"))
    p.add_argument("--against", action="append", default=[], metavar="URL",
                   help="also load another OpenAI-compatible server (its /v1 base URL; repeatable)")
    p.add_argument("--api-key", metavar="KEY", help="the --against servers' API key")
    p.add_argument("--responses", action="store_true",
                   help="also time Hearth's /v1/responses beside its /v1/chat/completions (one client for both)")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout (progress goes to stderr)")
    p.set_defaults(func=lambda args: serve.run(_options(serve.ServeBenchOptions, args, model=args.model)))


# --- hearth bench contention -----------------------------------------------------------------------------------
def _add_contention(kinds) -> None:
    p = kinds.add_parser("contention", help="generation speed while other programs use the CPU: fixed thread "
                         "counts against adaptive threads", description=contention.__doc__.split("\n\n", 1)[1])
    add_model_args(p)
    p.add_argument("--tokens", type=int, default=200, metavar="N", help="tokens per answer (default 200)",
                   **at_least(1, "tokens"))
    p.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per figure; medians are reported",
                   **at_least(1, "runs"))
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout (rows go to stderr)")
    p.set_defaults(func=lambda args: contention.run(_options(contention.ContentionOptions, args,
                                                                  model=model_path(args))))


def _add_gui(kinds) -> None:
    from app.ui.bench import gui_bench  # Qt itself is imported only when the GUI side runs

    p = kinds.add_parser("gui", help="generation speed with the window and graphs open vs headless",
                         description=gui_bench.__doc__.split("\n\n")[0])
    add_model_args(p)
    p.add_argument("--tokens", type=int, default=256, metavar="N", help="tokens generated per run (default 256)",
                   **at_least(1, "tokens"))
    p.add_argument("--repeats", type=int, default=7, metavar="N",
                   help="pairs of runs (default 7); medians are reported", **at_least(1, "runs"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lambda args: gui_bench.run(_options(gui_bench.GuiBenchOptions, args, model=model_path(args))))


# --- hearth bench docs ------------------------------------------------------------------------------------------
def _add_docs(kinds) -> None:
    from app.bench import docs

    p = kinds.add_parser("docs", help="documents: indexing rate, query latency and recall@5 (BM25, vectors, fused)",
                         description=docs.__doc__.split("\n\n")[1])
    p.add_argument("--topics", type=int, default=0, metavar="N", help="index only N pydoc topics (default: all 79)",
                   **at_least(0, "topics"))
    p.add_argument("--copies", type=int, default=1, metavar="N",
                   help="index the corpus N times over, each copy a folder of its own (43: about 20 MB)",
                   **at_least(1, "copies"))
    p.add_argument("--no-vectors", dest="vectors", action="store_false", help="BM25 only: no embedding model")
    p.add_argument("--embed-model", metavar="GGUF", help="an embedding GGUF instead of all-MiniLM-L6-v2")
    p.add_argument("--scale-chunks", type=int, default=0, metavar="N",
                   help="also measure latency with the index padded to N chunks (the goal: 100,000 under 100 ms)",
                   **at_least(0, "chunks"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lambda args: docs.run(_options(docs.DocsBenchOptions, args)))


# --- hearth bench media -----------------------------------------------------------------------------------------
def _add_media(kinds) -> None:
    from app.bench import media

    p = kinds.add_parser("media", help="a model that sees or hears: image encode, time to first token and tok/s "
                         "against llama.cpp's llama-mtmd-cli", description=media.__doc__.split("\n\n")[0])
    add_model_args(p)
    p.add_argument("--mmproj", metavar="PATH", help="the projector (default: the mmproj file beside the model)")
    p.add_argument("--audio", action="store_true", help="a sound instead of an image (a model that hears)")
    p.add_argument("--tokens", type=int, default=64, metavar="N", help="tokens generated per run (default 64)",
                   **at_least(1, "tokens"))
    p.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per side; medians are reported",
                   **at_least(1, "runs"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lambda args: media.run(_options(media.MediaBenchOptions, args, model=model_path(args))))
