"""Terminal escapes (issue 48, E19): document text, file names, model and server names reached the terminal raw
in `hearth docs search` and `docs list` (ESC/OSC cleared the screen and retitled it, OSC 52 would set the
clipboard) and a newline in a name split a result line. Every line the CLI prints has its control characters
escaped, as undecodable bytes already were; --json stays valid JSON and keeps the text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTROLS = ("\x1b", "\x07", "\x9b", "\x08", "\u202e")
CLEAR_AND_RETITLE = "\x1b[2J\x1b]0;pwned\x07"
CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"


def hearth(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONIOENCODING": "utf-8"}, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert "Traceback" not in run.stderr, run.stderr
    return run


def raw_controls(text: str) -> list[str]:
    return [c for c in CONTROLS if c in text]


def test_docs_add_list_and_search_escape_names_and_text(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    evil_name = "boiler\nnotes\x1b]0;title\x07.md"
    (folder / evil_name).write_text(f"# Reset {CLEAR_AND_RETITLE}\nThe boiler reset{CLIPBOARD} is blue \x9b31m.\n",
                                    encoding="utf-8")
    (folder / "empty\x1b[2J.txt").write_text("", encoding="utf-8")  # a problem sentence that names it
    add = hearth("docs", "add", str(folder), "-c", "home\x1b[31m", "--no-vectors")
    assert add.returncode == 0 and not raw_controls(add.stdout + add.stderr)
    assert "hearth: empty\\x1b[2J.txt is empty." in add.stderr

    listed = hearth("docs", "list", "--problems")
    assert not raw_controls(listed.stdout) and listed.stdout.startswith("home\\x1b[31m: 2 files")
    assert "  ! empty\\x1b[2J.txt is empty." in listed.stdout

    found = hearth("docs", "search", "boiler reset", "--mode", "bm25")
    assert found.returncode == 0 and not raw_controls(found.stdout)
    first, text = found.stdout.splitlines()[:2]  # the newline in the name no longer splits the result line
    assert first.startswith("[1] boiler\\nnotes\\x1b]0;title\\x07.md § Reset \\x1b[2J\\x1b]0;pwned\\x07  (")
    assert "reset\\x1b]52;c;ZWNobyBwd25lZA==\\x07 is blue \\u009b31m." in text

    as_json = hearth("docs", "search", "boiler reset", "--mode", "bm25", "--json")
    assert not raw_controls(as_json.stdout)
    (hit,) = json.loads(as_json.stdout)[:1]
    assert CLIPBOARD in hit["text"] and "\x9b31m" in hit["text"]  # the JSON still says exactly what the file says


def test_models_and_tools_lists_escape_names(tmp_path):
    models = Path(os.environ["HEARTH_HOME"]) / "data" / "models"
    models.mkdir(parents=True, exist_ok=True)
    (models / "evil\x1b]0;x\x07\nname.gguf").write_bytes(b"not a model")
    listed = hearth("models", "list", "--no-discover")
    assert not raw_controls(listed.stdout + listed.stderr)
    assert "evil\\x1b]0;x\\x07\\nname" in listed.stdout and "note: evil\\x1b]0;x\\x07\\nname.gguf" in listed.stderr

    assert hearth("tools", "add", "clock", "--", "mcp-server-time", "--tz", "\x1b[2J\u202eUTC").returncode == 0
    tools = hearth("tools", "list")
    assert not raw_controls(tools.stdout) and "clock  stdio  mcp-server-time --tz \\x1b[2J\\u202eUTC" in tools.stdout
