"""llama.cpp runs only in the engine process: after the window has built every page and the model manager has
offered its draft candidates (which asks whether two models share a vocabulary), `llama_cpp` is still not
imported in the window's own process, where a crash of it would take the window down (#44).

A process of its own: the suite's process imports llama.cpp for the engine's tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SCRIPT = r'''
import json, sys, time
from app.ui.shell.app import make_app
from app.ui.shell.main_window import MainWindow

app = make_app([])
w = MainWindow()
w.show()

def wait(condition, seconds):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        app.processEvents()
        time.sleep(0.02)

wait(lambda: w.bridge.ready and w.pages.all_built(), 120)
for i in range(w.tabs.count()):  # every page shown once, as a user clicking through the tabs
    w.tabs.setCurrentIndex(i)
    app.processEvents()
draft = sys.argv[1]
w.models.import_file(draft)
wait(lambda: draft in [m["path"] for m in w.models.models], 60)
w.tabs.setCurrentWidget(w.models)
w.models.table.selectRow(0)
settings = w.models.load_settings
settings.spec_mode.setCurrentText("Draft model")
offered = lambda: [settings.draft_choice.itemData(i) for i in range(settings.draft_choice.count())]
wait(lambda: draft in offered(), 60)
print(json.dumps({"llama_cpp": sorted(m for m in sys.modules if m.split(".")[0] == "llama_cpp"),
                  "offered": offered()}))
w.close()
'''


def test_the_windows_process_never_imports_llama_cpp(tmp_path, model_variant):
    draft = str(model_variant("Q4_0"))  # smaller than the bundled Q4_1, the same vocabulary
    env = {**os.environ, "HEARTH_HOME": str(tmp_path / "home"), "QT_QPA_PLATFORM": "offscreen",
           "HEARTH_NO_DISCOVERY": "1"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, draft], capture_output=True, text=True, env=env,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert draft in seen["offered"]
    assert seen["llama_cpp"] == []
