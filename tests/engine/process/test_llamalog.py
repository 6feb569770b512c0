"""llama.cpp's log: warnings go to the engine's log, a continuation line keeps its line's level, and where
llama.cpp runs in the user's terminal (the benchmarks) only errors are printed (#29: `hearth bench` printed
"control-looking token ... this is probably a bug in the model")."""

from __future__ import annotations

import pytest

from app.engine.process import llamalog

WARN, ERROR, INFO, CONT = 3, 4, 2, 5


@pytest.fixture
def log_levels(monkeypatch):
    # The engine's own level, whatever ran before in this process (a benchmark command run in-process by an
    # earlier test leaves errors_only() set).
    monkeypatch.setattr(llamalog, "_echo_level", llamalog._WARN)
    monkeypatch.setattr(llamalog, "_verbose", False)
    llamalog.clear()


def test_warnings_reach_the_engine_log_and_info_continuations_do_not(log_levels, capsys):
    llamalog._on_log(INFO, b"print_info: n_vocab = 49152", None)
    llamalog._on_log(CONT, b" (continued)\n", None)
    llamalog._on_log(WARN, b"load: control-looking token: 128247 '</s>' was not control-type\n", None)
    assert capsys.readouterr().err == "load: control-looking token: 128247 '</s>' was not control-type\n"


def test_in_the_users_terminal_only_errors_are_printed_and_all_is_kept(log_levels, capsys):
    llamalog.errors_only()
    llamalog._on_log(WARN, b"load: control-looking token: 128247 '</s>' was not control-type\n", None)
    llamalog._on_log(ERROR, b"llama_model_load: error loading model\n", None)
    llamalog._on_log(CONT, b"  more of the error\n", None)
    assert capsys.readouterr().err == "llama_model_load: error loading model\n  more of the error\n"
    assert "load: control-looking token: 128247 '</s>' was not control-type" in llamalog.recent_lines()
