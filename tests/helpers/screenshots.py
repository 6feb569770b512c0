"""Save screenshots of the main views: `python -m tests.helpers.screenshots [dark|light] [BENCH_RESULT.json]`.

Runs the real window (offscreen) against the real engine in a throwaway
HEARTH_HOME and writes docs/screenshots/{chat,models,download,benchmark}-{theme}.png
at 1366x768 (a common laptop screen), settings-{theme}.png (the Settings dialog), and chat and models again as
{view}-1024x700-{theme}.png and {view}-1366x768-{theme}.png: the window must fit both.
The download page shows the recommended list (no network needed). The
benchmark tab shows a saved `hearth bench matrix` result (the newest under
the real data folder, or the file named); without one it is skipped.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
LARGE = (1366, 768)
SMALL = (1024, 700)


def newest_bench_result() -> str | None:
    from app.core import paths

    found = sorted((paths.data_dir() / "bench").glob("matrix-*.json"), key=lambda p: p.stat().st_mtime)
    return str(found[-1]) if found else None


def main(theme: str = "light", bench_result: str | None = None) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    bench_result = bench_result or newest_bench_result()  # looked up before HEARTH_HOME points elsewhere
    os.environ["HEARTH_THEME"] = theme
    os.environ["HEARTH_HOME"] = tempfile.mkdtemp(prefix="hearth-shots-")
    from app.ui.shell.app import make_app
    from app.ui.bridge.event_wait import pause, wait_until
    from app.ui.shell.main_window import MainWindow

    make_app([])
    window = MainWindow()
    window.resize(*LARGE)
    window.show()

    wait_until(lambda: window.bridge.ready, 120)
    chat = window.chat
    chat.sampling.temperature.setValue(0.0)
    chat.sampling.max_tokens.setValue(90)

    def answer(action) -> None:
        finished: list = []
        window.bridge.generation_finished.connect(finished.append)
        action()
        wait_until(lambda: bool(finished), 300)
        window.bridge.generation_finished.disconnect(finished.append)

    for question in ("What is a GGUF file?", "Write a Python function that reverses a string."):
        chat.input.setPlainText(question)
        answer(chat.send)
    # A second version of the last answer, so the ‹ 2/2 › pager shows.
    chat.sampling.temperature.setValue(0.7)
    chat.sampling.seed.setValue(7)
    answer(chat.regenerate)
    OUT.mkdir(parents=True, exist_ok=True)

    def save(name: str) -> None:
        pause(0.6)
        window.grab().save(str(OUT / f"{name}.png"))

    for size in (LARGE, SMALL):
        window.resize(*size)
        tag = f"{size[0]}x{size[1]}"
        window.tabs.setCurrentWidget(window.chat)
        save(f"chat-{tag}-{theme}")
        window.tabs.setCurrentWidget(window.models)
        pause(1.0)
        save(f"models-{tag}-{theme}")
    window.resize(*LARGE)
    window.tabs.setCurrentWidget(window.chat)
    save(f"chat-{theme}")
    dialog = window.open_settings()  # theme, send key, data folder and the default load options
    pause(0.6)
    dialog.grab().save(str(OUT / f"settings-{theme}.png"))
    dialog.reject()
    window.tabs.setCurrentWidget(window.models)
    pause(1.0)
    save(f"models-{theme}")
    hub = window.models.hub
    window.models.sources.setCurrentWidget(hub)
    wait_until(lambda: hub.tree.topLevelItemCount() > 0, 10)
    from app.ui.models.hub_panel import FILE_ROLE

    hub.select(*hub.tree.topLevelItem(0).data(0, FILE_ROLE))
    save(f"download-{theme}")
    if bench_result:
        window.tabs.setCurrentWidget(window.bench)
        shown: list = []
        window.bench.result_shown.connect(shown.append)
        window.bench.open_result(bench_result)
        wait_until(lambda: bool(shown), 10)
        save(f"benchmark-{theme}")
    window.close()
    print("saved", sorted(p.name for p in OUT.glob("*.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main(*(sys.argv[1:3] or ["light"])))
