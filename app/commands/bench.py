"""`hearth bench [spec|window|matrix|compare]`: speed measured side by side, printed as ratios."""

from __future__ import annotations

import importlib
import importlib.util

from app.commands.options import add_model_args

# Each module has register(bench_subparsers); they join as they are written.
BENCH_MODULES = ["app.bench.spec", "app.bench.window", "app.bench.matrix", "app.bench.compare", "app.bench.gui"]


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure speed: pp512, tg128, Python overhead, ratio vs Llama.generate()",
                       description="Without a subcommand: prompt processing (512 tokens) and generation "
                       "(128 tokens) as llama-bench defines them, the decode loop's overhead per token, "
                       "and the ratio against llama-cpp-python's Llama.generate() on the same model.")
    add_model_args(p)
    p.add_argument("--repeats", type=int, default=5, metavar="N", help="runs per figure; medians are reported")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run_basic)
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND")
    for name in BENCH_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register(kinds)


def _run_basic(args) -> int:
    from app.bench.basic import run

    return run(args)
