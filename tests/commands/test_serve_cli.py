"""`hearth serve` with a flag it cannot use: one sentence naming the flag, before any model loads, and no crash log
(issue 56 E17, E20: --port 70000 was "internal error (OverflowError)" after the load, with a crash log;
--keep-responses-days nan was taken)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("flags, named", [
    (["--port", "70000"], "--port"),
    (["--port", "-1"], "--port"),
    (["--keep-responses-days", "nan"], "--keep-responses-days"),
    (["--keep-responses-days", "inf"], "--keep-responses-days"),
    (["--keep-responses-days", "-1"], "--keep-responses-days"),
    (["--keep-responses-mb", "nan"], "--keep-responses-mb"),
    (["--keep-responses-mb", "0"], "--keep-responses-mb"),
    (["--ttl", "nan"], "--ttl"),
    (["--max-body-mb", "inf"], "--max-body-mb"),
    (["--head-timeout", "inf"], "--head-timeout"),
])
def test_a_flag_serve_cannot_use_is_one_sentence_before_any_load(tmp_path, flags, named):
    proc = subprocess.run([sys.executable, "-m", "app", "serve", *flags], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HEARTH_HOME": str(tmp_path), "HEARTH_NO_DISCOVERY": "1"})
    said = proc.stderr.strip()
    assert proc.returncode == 1 and said.startswith("hearth: ") and named in said, (proc.returncode, said)
    assert len(said.splitlines()) == 1 and "internal error" not in said and "Traceback" not in said
    assert not proc.stdout  # no "serves" line: nothing was loaded
    assert not [p for p in tmp_path.rglob("*") if "crash" in p.name]
