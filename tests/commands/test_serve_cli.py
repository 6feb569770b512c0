"""`hearth serve` with a flag it cannot use: one sentence naming the flag and the value, before any model loads, exit
status 2 as argparse's own refusals, and no crash log (issue 56 E17, E20: --port 70000 was "internal error
(OverflowError)" after the load, with a crash log; --keep-responses-days nan was taken; then a sentence with status 1;
--keep-responses 1e20 and --keep-responses-mb 1e300 were taken, and every stored response was a 500)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("flags, said", [
    (["--port", "70000"], "--port takes a port from 0 to 65535 (0 picks a free one), not 70000."),
    (["--port", "-1"], "--port takes a port from 0 to 65535 (0 picks a free one), not -1."),
    (["--ollama-port", "65536"], "--ollama-port takes a port from 0 to 65535, not 65536."),
    (["--parallel", "0"], "--parallel takes 1 to 64 requests at once, not 0."),
    (["--keep-responses-days", "nan"], "--keep-responses-days takes a number of days more than 0 and at most 36,500 "
                                       "(a hundred years), not nan."),
    (["--keep-responses-days", "inf"], "--keep-responses-days"),
    (["--keep-responses-days", "-1"], "--keep-responses-days"),
    (["--keep-responses", "-1"], "--keep-responses takes 0 to 1,000,000,000 responses, not -1."),
    (["--keep-responses", "99999999999999999999"], "--keep-responses"),
    (["--keep-responses-mb", "nan"], "--keep-responses-mb"),
    (["--keep-responses-mb", "0"], "--keep-responses-mb"),
    (["--keep-responses-mb", "1e300"], "--keep-responses-mb"),
    (["--ttl", "nan"], "--ttl takes a number of seconds more than 0, not nan."),
    (["--ttl=-inf"], "--ttl takes a number of seconds more than 0, not -inf."),
    (["--max-models", "0"], "--max-models takes 1 or more models, not 0."),
    (["--max-body-mb", "inf"], "--max-body-mb takes a number of megabytes more than 0, not inf."),
    (["--max-body-mb", "nan"], "--max-body-mb"),
    (["--head-timeout", "inf"], "--head-timeout takes a number of seconds more than 0, not inf."),
    (["--body-timeout", "-1"], "--body-timeout"),
    (["--send-timeout", "nan"], "--send-timeout"),
    (["--max-connections", "0"], "--max-connections takes 1 or more connections, not 0."),
    (["--max-queue", "-1"], "--max-queue takes 0 or more waiting requests, not -1."),
    # The load options' own (app/protocol/option_fields.py), every float among them: bad arguments too.
    (["--step-timeout", "nan"], "--step-timeout"),
    (["--window-fraction", "inf"], "--window-fraction"),
    (["--h2o-heavy", "-1"], "--h2o-heavy"),
    (["--h2o-recent", "nan"], "--h2o-recent"),
])
def test_a_flag_serve_cannot_use_is_one_sentence_before_any_load(tmp_path, flags, said):
    refused_before_any_load(tmp_path, ["serve", *flags], said)


# The same rule for the other commands' numbers (app/commands/options.py, within): 0 or -5 tokens ran a
# benchmark of one token, 0 repeats printed medians of nothing, and the tool flags were a status-1 sentence after the
# model had loaded.
@pytest.mark.parametrize("argv, said", [
    (["bench", "--repeats", "0"], "--repeats takes 1 or more runs, not 0."),
    (["bench", "window", "--tokens", "-5"], "--tokens takes 1 or more tokens, not -5."),
    (["bench", "window", "--ppl-window", "0"], "--ppl-window takes a window of 2 or more tokens, not 0."),
    (["bench", "window", "--sinks", "-1"], "--sinks"),
    (["bench", "serve", "--parallel", "1"], "--parallel takes 2 to 64 streams (the benchmark compares N streams with "
                                            "one), not 1."),
    (["bench", "matrix", "--timeout", "nan"], "--timeout takes a number of seconds more than 0, not nan."),
    (["bench", "quality", "--text", "x", "--ctx", "10"], "--ctx takes a context of 64 to"),
    (["chat", "--prompt", "hi", "--max-tool-rounds", "0"], "--max-tool-rounds takes 1 or more rounds, not 0."),
    (["chat", "--prompt", "hi", "--tool-timeout", "-1"], "--tool-timeout takes a number of seconds more than 0"),
    (["chat", "--prompt", "hi", "--allow-tools"], "need --tools SERVER."),
])
def test_a_number_another_command_cannot_use_is_one_sentence_before_any_load(tmp_path, argv, said):
    refused_before_any_load(tmp_path, argv, said)


def refused_before_any_load(tmp_path, argv: list[str], said: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "app", *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HEARTH_HOME": str(tmp_path), "HEARTH_NO_DISCOVERY": "1"})
    out = proc.stderr.strip()
    assert proc.returncode == 2 and out.startswith("hearth: ") and said in out, (proc.returncode, out)
    assert len(out.splitlines()) == 1 and "internal error" not in out and "Traceback" not in out
    assert not proc.stdout  # no "serves" line: nothing was loaded
    assert not [p for p in tmp_path.rglob("*") if "crash" in p.name]


def test_the_largest_values_each_flag_takes_are_taken():
    """The highest of each range is a value the server runs with: the bounds refuse only what cannot work."""
    import argparse

    from app.commands import serve

    p = argparse.ArgumentParser()
    serve.register(p.add_subparsers())
    args = p.parse_args(["serve", "--port", "65535", "--keep-responses", "1000000000", "--keep-responses-days", "36500",
                         "--keep-responses-mb", "1e9", "--ttl", "1e300", "--max-body-mb", "1e-9", "--parallel", "64"])
    from app.commands.options import declared_options
    from app.server.options import ServeOptions

    assert declared_options(args, ServeOptions).limits.max_body_bytes == 1  # a tiny limit is a byte, never 0


def test_the_sampling_flags_set_what_a_request_leaves_out():
    import argparse

    from app.commands import serve
    from app.server.options import request_defaults

    p = argparse.ArgumentParser()
    serve.register(p.add_subparsers())
    sampling = serve.request_sampling(p.parse_args(["serve", "--temp", "0.2", "--max-tokens", "7", "--stop", "END"]))
    assert (sampling.temperature, sampling.max_tokens, sampling.stop) == (0.2, 7, ["END"])
    assert set(sampling.given) == {"temperature", "max_tokens"}
    assert serve.request_sampling(p.parse_args(["serve"])) == request_defaults()  # none given: as before
