"""`hearth serve`: an OpenAI- and Anthropic-compatible API for other programs (editors, scripts, agents)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from app.commands.options import (add_declared_args, add_load_args, add_sampling_args, declared_options, load_options,
                                  sampling_options, within)
from app.core import env
from app.core.gguf.modelfile import check_model_file
from app.protocol.messages import LoadOptions
from app.protocol.option_fields import accepted
from app.server.options import ServeOptions, request_defaults  # the declarations alone: not the server's stack

PARALLEL = tuple(int(n) for n in accepted("n_parallel"))  # as LoadOptions.n_parallel declares it


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the model over an OpenAI- and Anthropic-compatible HTTP API",
                       description="Load a model and serve it at http://HOST:PORT/v1 for any OpenAI client "
                       "(and /v1/messages for Anthropic's). Binds 127.0.0.1 unless told otherwise; another "
                       "address needs an API key. The sampling flags (--temp, --top-p, --max-tokens, ...) set what "
                       "a request leaves out.")
    add_load_args(p)
    p.add_argument("--parallel", type=int, default=LoadOptions.n_parallel, metavar="N",
                   help=f"answer up to N requests at once, decoded together in one batch (default "
                   f"{LoadOptions.n_parallel})",
                   **within(*PARALLEL, takes="{} to {} requests at once".format(*PARALLEL)))
    add_declared_args(p, ServeOptions)  # each with its range: a bad number is one sentence before any load (#56)
    # What a request leaves out is sampled with these where given (clients such as Claude Code send no temperature).
    add_sampling_args(p)
    p.set_defaults(func=run)


def request_sampling(args: argparse.Namespace):
    """What a request leaves out: the server's defaults (request_defaults), with the sampling flags given; those
    count as given, so the model's recommendation does not replace them either."""
    flags = sampling_options(args)
    return replace(request_defaults(), given=flags.given or None, stop=flags.stop,
                   **{name: getattr(flags, name) for name in flags.given})


def run(args: argparse.Namespace) -> int:
    from app.server.api_tools import check_tools
    from app.server.run import serve

    options = replace(load_options(args), n_parallel=args.parallel)
    check_model_file(options.model_path)
    served = replace(declared_options(args, ServeOptions), sampling=request_sampling(args))
    if served.api_key is None:
        served.api_key = env.API_KEY.get()
    check_tools(served.tools, served.tools_in_chat)
    return serve(options, served)
