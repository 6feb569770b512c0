"""Every flag a benchmark accepts reaches the benchmark: `hearth bench serve --gpu-layers -1` was parsed and then
dropped (its options had no such field), so on the H200 its server ran on the CPU at 0.09x of llama-server while
the same server with the flag ran at 1.07x (#46, docs/results/gpu-h200-2026-12-04.json)."""

from __future__ import annotations

import argparse
import dataclasses

from app.bench import compare, contention, docs, matrix_plan, media, quality, serve, spec, window
from app.cli import build_parser

# Each `hearth bench KIND`'s options, as app/commands/bench.py builds them from the parsed flags.
OPTIONS = {"serve": serve.ServeBenchOptions, "spec": spec.SpecOptions, "window": window.WindowOptions,
           "matrix": matrix_plan.MatrixOptions, "quality": quality.QualityOptions, "compare": compare.CompareOptions,
           "contention": contention.ContentionOptions, "docs": docs.DocsBenchOptions,
           "media": media.MediaBenchOptions}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_bench_flag_is_an_option_of_its_benchmark():
    kinds = _subcommands(_subcommands(build_parser())["bench"])
    for kind, parser in kinds.items():
        if kind == "gui":  # the window's own benchmark: its options live with Qt (app/ui/bench)
            from app.ui.bench.gui_bench import GuiBenchOptions as cls
        else:
            assert kind in OPTIONS, f"hearth bench {kind}: add its options class here"
            cls = OPTIONS[kind]
        names = {f.name for f in dataclasses.fields(cls)}
        dropped = [a.option_strings[0] for a in parser._actions
                   if a.option_strings and a.dest != "help" and a.dest not in names]
        assert not dropped, f"hearth bench {kind} parses {dropped} but never passes them on"


def test_bench_serve_starts_its_server_with_the_layers_and_threads_asked():
    args = build_parser().parse_args(["bench", "serve", "--gpu-layers", "-1", "--threads", "3", "--ctx", "1024"])
    o = serve.ServeBenchOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(serve.ServeBenchOptions)
                                   if hasattr(args, f.name)})
    line = serve.serve_args(o)
    assert line[line.index("--gpu-layers") + 1] == "-1"
    assert line[line.index("--threads") + 1] == "3"
    assert line[line.index("--ctx") + 1] == "1024"
