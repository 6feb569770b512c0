"""`hearth serve`: an OpenAI- and Anthropic-compatible API for other programs (editors, scripts, agents)."""

from __future__ import annotations

import argparse

from app.commands.options import add_declared_args, add_load_args, declared_options, load_options, within
from app.core import env
from app.core.gguf.modelfile import check_model_file
from app.protocol.option_fields import accepted
from app.server.options import ServeOptions  # the declarations alone: nothing of the server's stack loads

PARALLEL = tuple(int(n) for n in accepted("n_parallel"))  # as LoadOptions.n_parallel declares it


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the model over an OpenAI- and Anthropic-compatible HTTP API",
                       description="Load a model and serve it at http://HOST:PORT/v1 for any OpenAI client "
                       "(and /v1/messages for Anthropic's). Binds 127.0.0.1 unless told otherwise; another "
                       "address needs an API key.")
    add_load_args(p)
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="answer up to N requests at once, decoded together in one batch (default 1)",
                   **within(*PARALLEL, takes="{} to {} requests at once".format(*PARALLEL)))
    add_declared_args(p, ServeOptions)  # each with its range: a bad number is one sentence before any load (#56)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from app.server.api_tools import check_tools
    from app.server.run import serve

    options = replace(load_options(args), n_parallel=args.parallel)
    check_model_file(options.model_path)
    served = declared_options(args, ServeOptions)
    if served.api_key is None:
        served.api_key = env.API_KEY.get()
    check_tools(served.tools, served.tools_in_chat)
    return serve(options, served)
