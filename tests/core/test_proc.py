"""The child-process runner and the one table of hidden entry flags."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from app.core import proc

ROOT = Path(__file__).resolve().parents[2]


def _child(tmp_path: Path, body: str) -> dict:
    """env for a child module `fake_child` written into tmp_path."""
    (tmp_path / "fake_child.py").write_text(textwrap.dedent(body), encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}


def test_events_arrive_decoded_and_stray_output_goes_to_the_log(tmp_path):
    env = _child(tmp_path, """
        import sys
        from app.core.proc import emit, keep_stdout_for_events
        print("before: a library printing")  # not JSON: to the log
        keep_stdout_for_events()
        print("after: goes to stderr")
        emit("progress", done=1)
        emit("result", value=sys.stdin.read())
        sys.exit(3)
    """)
    log = tmp_path / "child.log"
    with open(log, "wb") as fh, proc.JsonChild("fake_child", log=fh, stdin=b"hello", env=env) as child:
        seen = []
        code = child.run(seen.append)
    assert seen == [{"ev": "progress", "done": 1}, {"ev": "result", "value": "hello"}]
    assert code == 3
    text = log.read_text()
    assert "before: a library printing" in text and "after: goes to stderr" in text


def test_a_tick_that_raises_kills_the_child(tmp_path):
    env = _child(tmp_path, """
        import time
        time.sleep(60)
    """)
    stop = threading.Event()
    with pytest.raises(KeyboardInterrupt):
        with proc.JsonChild("fake_child", env=env) as child:
            def tick():
                if stop.is_set():
                    raise KeyboardInterrupt
                stop.set()
            child.run(lambda _e: None, on_tick=tick)
    assert child.returncode is not None and child.returncode < 0  # killed, not finished


def test_exit_reasons_read_as_sentences():
    assert proc.exit_reason(-9) == "it was stopped by SIGKILL (killed, possibly for lack of memory)"
    assert proc.exit_reason(2) == "it exited with code 2"
    assert proc.exit_reason(None) == "it stopped answering"


def test_every_hidden_flag_names_a_function_that_exists():
    for flag, entry in proc.ENTRY_POINTS.items():
        assert flag.startswith("--")
        assert importlib.util.find_spec(entry.module) is not None, entry.module
        source = Path(importlib.util.find_spec(entry.module).origin).read_text(encoding="utf-8")
        assert f"def {entry.function}(" in source, (flag, entry)
    assert proc.ENTRY_FLAGS["app.bench.matrix_worker"] == "--bench-matrix-worker"


def test_a_frozen_app_starts_children_through_its_flags(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert proc.child_command("app.core.making.quantize_worker", "a") == [sys.executable, "--quantize-worker", "a"]


def test_main_dispatches_a_hidden_flag(monkeypatch):
    called = {}
    fake = type(sys)("fake_entry")
    fake.main = lambda rest: called.setdefault("rest", rest) and 0
    monkeypatch.setitem(sys.modules, "fake_entry", fake)
    monkeypatch.setitem(proc.ENTRY_POINTS, "--fake", proc.EntryPoint("fake_entry", "main", True))
    monkeypatch.setattr(sys, "argv", ["hearth", "--fake", "x", "y"])
    importlib.import_module("app.__main__").main()
    assert called["rest"] == ["x", "y"]
