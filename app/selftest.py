"""`hearth --selftest`: prove that this installation works, in a few seconds, without a display.

It creates the main window offscreen, loads the bundled model in an engine
process and generates a few tokens, then prints one line per check and exits
0 or 1. A frozen bundle runs the same code, so this is how an installer is
checked on a clean machine. It works in a temporary Hearth home, so the
user's settings, chats and logs stay untouched.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

from app import __version__
from app.core.errors import HearthError
from app.core.metrics import seconds_since_process_start

PROMPT = "Say hello in one short sentence."
MAX_TOKENS = 8
WINDOW_TIMEOUT_S = 20.0
LOAD_TIMEOUT_S = 180.0
GENERATE_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 15


def check_resources() -> str:
    from app.core.resources import resource_path

    path = resource_path("recommended_models.json")
    if not path.is_file():
        raise HearthError(f"{path} is missing; reinstall Hearth.")
    return str(path.parent)


def check_model() -> str:
    from app.core.bundled import bundled_model_path
    from app.core.modelfile import check_model_file

    path = bundled_model_path()
    check_model_file(path)
    return f"{path.name}, {path.stat().st_size / 1e6:.0f} MB, at {path.parent}"


def check_gui() -> str:
    # The selftest must never open a window, nor need a display.
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    started = time.perf_counter()
    from PySide6.QtCore import QEvent, QObject

    from app.ui.app import make_app
    from app.ui.main_window import MainWindow

    class _FirstPaint(QObject):
        seen = False

        def eventFilter(self, obj, event):  # noqa: N802 (Qt's name)
            if event.type() == QEvent.Paint:
                self.seen = True
            return False

    app = make_app([])
    window = MainWindow(load_on_start=False)
    watcher = _FirstPaint()
    window.installEventFilter(watcher)
    window.show()
    deadline = time.monotonic() + WINDOW_TIMEOUT_S
    while not watcher.seen and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.005)
    shown_s = time.perf_counter() - started
    since_start = seconds_since_process_start()
    try:
        if not watcher.seen:
            raise HearthError(f"The main window was not painted within {WINDOW_TIMEOUT_S:.0f} s.")
        image = window.grab().toImage()
        if image.isNull() or image.width() < 100 or image.height() < 100:
            raise HearthError("The main window rendered an empty image.")
        size = f"{image.width()}x{image.height()}"
    finally:
        window.removeEventFilter(watcher)
        window.close()
        app.processEvents()
    detail = f"main window {size} painted offscreen in {shown_s:.2f} s"
    if since_start is not None:
        detail += f" ({since_start:.2f} s after the process started)"
    return detail


def check_engine() -> str:
    from app.core.bundled import bundled_model_path
    from app.engine import protocol as P
    from app.engine.client import EngineClient

    client = EngineClient()
    try:
        started = time.perf_counter()
        info = client.load(P.LoadOptions(model_path=str(bundled_model_path()), n_ctx=512), timeout=LOAD_TIMEOUT_S)
        load_s = time.perf_counter() - started
        sampling = P.SamplingOptions(max_tokens=MAX_TOKENS, temperature=0.0, seed=1)
        done = {}
        for event in client.chat([{"role": "user", "content": PROMPT}], sampling, timeout=GENERATE_TIMEOUT_S):
            if isinstance(event, P.Done):
                done = event
        text = " ".join(str(done.get("text", "")).split())
        if not done.get("completion_tokens") or not text:
            raise HearthError("The engine loaded the model but generated no text.")
        bufts = {True: "on", False: "off"}.get(info.get("extra_bufts"), "default")
        return (f"loaded in {load_s:.1f} s (extra buffer types {bufts}); {done['completion_tokens']} tokens at "
                f"{done.get('gen_tok_s', 0.0):.1f} tok/s: {text[:60]!r}")
    except HearthError as exc:
        raise HearthError(f"{exc}{_log_tail(client.log_path)}") from None
    finally:
        client.close()


def _log_tail(path: Path | None) -> str:
    if path is None or not path.is_file():
        return ""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return ("\n        engine log:\n" + "\n".join(f"        | {line}" for line in lines)) if lines else ""


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("resources", check_resources),
    ("model", check_model),
    ("gui", check_gui),
    ("engine", check_engine),
]


def _describe_build() -> str:
    kind = "frozen bundle" if getattr(sys, "frozen", False) else "Python install"
    return (f"Hearth {__version__} selftest ({kind}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.machine()}, executable {sys.executable})")


def run_selftest() -> int:
    print(_describe_build(), flush=True)
    own_home = "HEARTH_HOME" not in os.environ
    if own_home:
        os.environ["HEARTH_HOME"] = tempfile.mkdtemp(prefix="hearth-selftest-")
    failures = []
    try:
        for name, check in CHECKS:
            try:
                detail = check()
            except HearthError as exc:
                detail, ok = str(exc), False
            except Exception as exc:  # the report must name any failure, whatever raised it
                where = traceback.extract_tb(exc.__traceback__)[-1]
                place = "/".join(Path(where.filename).parts[-2:])
                detail, ok = f"{type(exc).__name__}: {exc} (at {place}:{where.lineno})", False
            else:
                ok = True
            if not ok:
                failures.append(f"{name}: {detail.splitlines()[0]}")
            print(f"  {'ok  ' if ok else 'FAIL'}  {name:<9}  {detail}", flush=True)
    finally:
        if own_home:
            shutil.rmtree(os.environ.pop("HEARTH_HOME"), ignore_errors=True)
    if failures:
        print(f"selftest failed: {'; '.join(failures)}", flush=True)
        return 1
    print("selftest passed", flush=True)
    return 0
