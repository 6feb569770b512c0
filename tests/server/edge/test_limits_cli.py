"""`hearth serve`'s limit flags: their help states the defaults app/server/edge/limits.py applies (the CLI cannot
import the server to read them: no CLI start may import app.server), and a wrong value is one sentence."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from app.commands import serve
from app.core.errors import HearthError
from app.server.edge.limits import Limits

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
    assert serve._limits(args) == Limits()
    args = parser().parse_args(["serve", "--head-timeout", "2", "--max-body-mb", "0.5", "--max-queue", "0"])
    assert serve._limits(args) == Limits(head_timeout_s=2, max_body_bytes=2**19, max_queue=0)


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
    assert serve._kept_bytes(parser().parse_args(["serve"])) == {}
    assert serve._kept_bytes(parser().parse_args(["serve", "--keep-responses-mb", "0.5"])) == {
        "keep_responses_bytes": 2**19}


def test_the_cli_does_not_import_the_server_to_offer_its_flags():
    code = "import sys; import app.cli, app.commands.serve; print('app.server' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() \
        == "False"
