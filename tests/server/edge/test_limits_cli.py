"""`hearth serve`'s limit flags: their help states the defaults app/server/edge/limits.py applies (each declared once,
on its field of Limits or ServeOptions in app/server/options.py, which the CLI reads without loading the server's
stack), and a wrong value is one sentence."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from app.commands import serve
from app.commands.options import declared_options
from app.core.errors import HearthError
from app.server.edge.limits import Limits
from app.server.options import ServeOptions

FLAGS = {"--head-timeout": Limits().head_timeout_s, "--body-timeout": Limits().body_timeout_s,
         "--send-timeout": Limits().send_timeout_s,
         "--max-body-mb": Limits().max_body_bytes / 2**20, "--max-connections": Limits().max_connections,
         "--max-queue": Limits().max_queue}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    serve.register(p.add_subparsers())
    return p


def test_the_help_says_the_defaults_the_server_applies():
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    helps = {a.option_strings[0]: a.help for a in sub._actions if a.option_strings}
    for flag, default in FLAGS.items():
        assert helps[flag].endswith(f"(default {default:g})"), (flag, helps[flag])
    args = parser().parse_args(["serve"])
    assert declared_options(args, ServeOptions).limits == Limits()
    args = parser().parse_args(["serve", "--head-timeout", "2", "--max-body-mb", "0.5", "--max-queue", "0"])
    assert declared_options(args, ServeOptions).limits == Limits(head_timeout_s=2, max_body_bytes=2**19, max_queue=0)


@pytest.mark.parametrize("flag, value", [("--head-timeout", "0"), ("--max-connections", "0"), ("--max-queue", "-1"),
                                         ("--max-body-mb", "0"), ("--send-timeout", "0")])
def test_a_wrong_limit_is_one_sentence(flag, value):
    with pytest.raises(HearthError, match=f"^{flag} takes .*, not {value}\\.$"):
        parser().parse_args(["serve", flag, value])


def test_the_stored_responses_bound_in_bytes_says_the_servers_default():
    from app.server.responses.store import DEFAULT_MAX_BYTES

    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    helps = {a.option_strings[0]: a.help for a in sub._actions if a.option_strings}
    assert helps["--keep-responses-mb"].endswith(f"(default {DEFAULT_MAX_BYTES / 2**20:g})")
    assert declared_options(parser().parse_args(["serve"]), ServeOptions).keep_responses_bytes == DEFAULT_MAX_BYTES
    assert declared_options(parser().parse_args(["serve", "--keep-responses-mb", "0.5"]),
                            ServeOptions).keep_responses_bytes == 2**19


def test_the_cli_does_not_import_the_server_to_offer_its_flags():
    # The declarations (app.server.options) are read; the server's stack and its endpoints are not loaded.
    code = ("import sys; import app.cli, app.commands.serve; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn') "
            "or m.startswith('app.server.') and m != 'app.server.options'))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() \
        == "[]"
