"""The extra-buffer-types probe: detect a crash in a throwaway child, fall back, remember, tell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from app.core import paths
from app.engine.probes import probe
from app.protocol.messages import LoadOptions


def test_probe_runs_once_and_is_remembered(bundled_model):
    first = probe.extra_bufts_decision(str(bundled_model))
    assert first["ok"] in (True, False)
    stored = json.loads(paths.machine_facts_file().read_text())
    assert stored["extra_bufts"]["key"] == probe.machine_key()
    assert probe.cached_result() == first


def test_crashing_probe_turns_extra_buffers_off(bundled_model, monkeypatch, engine):
    # This machine's CPU does not have the AMX fault; the child segfaults on purpose instead.
    monkeypatch.setenv(probe.SIMULATE_CRASH_ENV, "1")
    paths.machine_facts_file().unlink(missing_ok=True)
    result = probe.run_probe(str(bundled_model))
    assert result["ok"] is False
    assert "SIGSEGV" in result["detail"] and "off" in result["detail"]
    monkeypatch.delenv(probe.SIMULATE_CRASH_ENV)
    # Remembered: the engine loads with them off without probing again, and says so.
    info = engine.load(LoadOptions(model_path=str(bundled_model), n_ctx=256))
    assert info["extra_bufts"] is False
    assert info["extra_bufts_probe"]["ok"] is False
    doctor = subprocess.run([sys.executable, "-m", "app", "doctor"], capture_output=True, text=True,
                            env=dict(os.environ), timeout=120)
    assert "Extra buffer types (AMX/repack): off" in doctor.stdout


def test_a_first_load_does_not_wait_for_the_probe(bundled_model):
    """#19 cold start: a machine never probed loads at once with extra buffer types off; the probe runs
    beside it and the next load uses its answer."""
    paths.machine_facts_file().unlink(missing_ok=True)
    decision = probe.decision_or_background_probe(str(bundled_model))
    assert decision["background"] is True and decision["ok"] is False
    probe.wait_for_background_probe(120)
    remembered = probe.cached_result()
    assert remembered is not None and "ok" in remembered
    assert probe.decision_or_background_probe(str(bundled_model)) == remembered


def test_a_first_load_starts_the_probe_only_once_its_model_is_loaded(bundled_model, monkeypatch):
    """On two cores the probe's child loading a model of its own beside the first load slowed that load."""
    from app.engine.process import session

    paths.machine_facts_file().unlink(missing_ok=True)
    events: list[str] = []
    runtime = session.Runtime
    monkeypatch.setattr(session, "Runtime", lambda *a, **k: (runtime(*a, **k), events.append("loaded"))[0])
    monkeypatch.setattr(session, "start_background_probe", lambda path: events.append(f"probe {path}"))
    loaded = session.Session.load(LoadOptions(model_path=str(bundled_model), n_ctx=256))
    try:
        assert events == ["loaded", f"probe {bundled_model}"]
        assert loaded.describe()["extra_bufts_probe"]["background"] is True
    finally:
        loaded.close()


def test_a_one_shot_chat_on_a_machine_never_probed_leaves_the_answer_remembered():
    """The probe outlives the engine that started it: before, a `hearth chat --prompt` ended first, its answer
    was never kept, and every later run probed again beside its own work."""
    paths.machine_facts_file().unlink(missing_ok=True)
    chat = subprocess.run([sys.executable, "-m", "app", "chat", "--prompt", "Hi", "--max-tokens", "1", "--temp", "0"],
                          capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert chat.returncode == 0, chat.stderr
    deadline = time.monotonic() + 120
    while probe.cached_result() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    remembered = probe.cached_result()
    assert remembered is not None and remembered["detail"]
