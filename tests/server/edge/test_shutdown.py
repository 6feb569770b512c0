"""Stopping `hearth serve` as a terminal or a service manager does: a signal to its whole process group, which
reaches its engine too. Shutdown must not start anything (a second engine once started, and loaded the model,
while the server shut down); an engine stopped alone by a signal still comes back."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.server.conftest import start_server, stop_server

pytestmark = pytest.mark.slow

USER = [{"role": "user", "content": "Write a long story about the sea."}]


def engine_of(proc) -> psutil.Process:
    engines = [p for p in psutil.Process(proc.pid).children(recursive=True) if "app.engine.process.host" in p.cmdline()]
    assert len(engines) == 1, engines
    return engines[0]


def engine_logs(home: Path) -> list[Path]:
    return sorted((home / "logs").glob("engine-*.log"))


def health(base: str) -> int:
    try:
        return httpx.get(base.removesuffix("/v1") + "/health", timeout=5).status_code
    except httpx.TransportError:
        return 0


def test_sigterm_to_the_process_group_starts_no_second_engine(tmp_path):
    proc, base = start_server(env={"HEARTH_HOME": str(tmp_path)}, session=True)
    try:
        # An engine stopped alone (not the server) by SIGTERM is not left down: it comes back a moment later.
        first = engine_of(proc)
        first.send_signal(signal.SIGTERM)
        first.wait(10)
        deadline = time.monotonic() + 30
        while health(base) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert health(base) == 200 and engine_of(proc).pid != first.pid
        assert len(engine_logs(tmp_path)) == 2

        # Now the group, while an answer streams.
        ended = []

        def stream() -> None:
            try:
                with httpx.stream("POST", f"{base}/chat/completions", timeout=60,
                                  json={"messages": USER, "max_tokens": 400, "stream": True}) as r:
                    for _ in r.iter_lines():
                        pass
            except httpx.TransportError:
                pass
            ended.append(time.monotonic())

        streaming = threading.Thread(target=stream)
        streaming.start()
        time.sleep(1.0)
        engine = engine_of(proc)
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(15) == -signal.SIGTERM  # it ends as SIGTERM ends a program, after closing its engine
        stopped = time.monotonic() - started
        streaming.join(15)
        assert ended and not engine.is_running()
        time.sleep(1.0)  # a restart would have begun by now (it began at once)
        assert len(engine_logs(tmp_path)) == 2, engine_logs(tmp_path)
        log = Path(proc.log_path).read_text()
        assert "Traceback" not in log and "Error" not in log, log[-2000:]
        assert stopped < 5, stopped
    finally:
        if proc.poll() is None:
            stop_server(proc)
