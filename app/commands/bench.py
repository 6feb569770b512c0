"""`hearth bench [spec|window|matrix|quality|compare|serve|contention|gui|docs|media]`: speed measured side by side,
printed as ratios.

The measuring is app/bench (headless, Qt-free) and, for `gui`, app/ui/bench; this module owns the command
line: it builds the parsers, turns the flags into each benchmark's options, and hands the charts that need
Qt (--plot) to app/ui/bench.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from app.core import env
from app.bench import compare, contention, matrix, matrix_plan, serve, spec, window
from app.bench.basic import BasicOptions
from app.commands.options import add_declared_args, add_model_args, model_path

# Each benchmark's flags are declared on its options' fields (app/bench/*.py), each number with its range: 0 or -5
# tokens ran a benchmark of one token; 0 repeats printed medians of none.


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure speed: pp512, tg128, Python overhead, ratio vs Llama.generate()",
                       description="Without a subcommand: prompt processing (512 tokens) and generation "
                       "(128 tokens) as llama-bench defines them, the decode loop's overhead per token, "
                       "and the ratio against llama-cpp-python's Llama.generate() on the same model.")
    add_model_args(p)
    add_declared_args(p, BasicOptions)
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
    add_declared_args(p, spec.SpecOptions)
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
    add_declared_args(p, window.WindowOptions)
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
    add_declared_args(p, matrix_plan.MatrixOptions)
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
    add_declared_args(p, quality.QualityOptions)
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
    add_declared_args(p, compare.CompareOptions)
    p.set_defaults(func=lambda args: compare.run(_options(compare.CompareOptions, args)))


# --- hearth bench serve ----------------------------------------------------------------------------------------
def _add_serve(kinds) -> None:
    p = kinds.add_parser("serve", help="the API server under concurrent load: N streams against one, "
                         "side by side with other servers",
                         description=serve.__doc__.split("\n\n", 1)[1])
    add_model_args(p)
    add_declared_args(p, serve.ServeBenchOptions)
    p.set_defaults(func=lambda args: serve.run(_options(serve.ServeBenchOptions, args, model=args.model)))


# --- hearth bench contention -----------------------------------------------------------------------------------
def _add_contention(kinds) -> None:
    p = kinds.add_parser("contention", help="generation speed while other programs use the CPU: fixed thread "
                         "counts against adaptive threads", description=contention.__doc__.split("\n\n", 1)[1])
    add_model_args(p)
    add_declared_args(p, contention.ContentionOptions)
    p.set_defaults(func=lambda args: contention.run(_options(contention.ContentionOptions, args,
                                                                  model=model_path(args))))


# --- hearth bench gui ------------------------------------------------------------------------------------------
def _add_gui(kinds) -> None:
    from app.ui.bench import gui_bench  # Qt itself is imported only when the GUI side runs

    p = kinds.add_parser("gui", help="generation speed with the window and graphs open vs headless",
                         description=gui_bench.__doc__.split("\n\n")[0])
    add_model_args(p)
    add_declared_args(p, gui_bench.GuiBenchOptions)
    p.set_defaults(func=lambda args: gui_bench.run(_options(gui_bench.GuiBenchOptions, args, model=model_path(args))))


# --- hearth bench docs ------------------------------------------------------------------------------------------
def _add_docs(kinds) -> None:
    from app.bench import docs

    p = kinds.add_parser("docs", help="documents: indexing rate, query latency and recall@5 (BM25, vectors, fused)",
                         description=docs.__doc__.split("\n\n")[1])
    add_declared_args(p, docs.DocsBenchOptions)
    p.set_defaults(func=lambda args: docs.run(_options(docs.DocsBenchOptions, args)))


# --- hearth bench media -----------------------------------------------------------------------------------------
def _add_media(kinds) -> None:
    from app.bench import media

    p = kinds.add_parser("media", help="a model that sees or hears: image encode, time to first token and tok/s "
                         "against llama.cpp's llama-mtmd-cli", description=media.__doc__.split("\n\n")[0])
    add_model_args(p)
    add_declared_args(p, media.MediaBenchOptions)
    p.set_defaults(func=lambda args: media.run(_options(media.MediaBenchOptions, args, model=model_path(args))))
