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
    # This machine's CPU does not have the AMX fault; the probe's child is one that segfaults instead (the seam
    # the test injects: the product reads no variable for it).
    paths.machine_facts_file().unlink(missing_ok=True)
    result = probe.run_probe(str(bundled_model), command=[sys.executable, "-c", "import ctypes; ctypes.string_at(0)"])
    assert result["ok"] is False
    assert "SIGSEGV" in result["detail"] and "off" in result["detail"]
    # Remembered: the engine loads with them off without probing again, and says so.
    info = engine.load(LoadOptions(model_path=str(bundled_model), n_ctx=256))
    assert info["extra_bufts"] is False
    assert info["extra_bufts_probe"]["ok"] is False
    doctor = subprocess.run([sys.executable, "-m", "app", "doctor"], capture_output=True, text=True,
                            env=dict(os.environ), timeout=120)
    assert "Extra buffer types (AMX/repack): off" in doctor.stdout


def test_a_first_load_waits_for_a_short_probe_and_runs_as_every_later_one(bundled_model, monkeypatch):
    """#49.11: a first start that loaded with extra buffer types off answered at 0.83-0.86x where later ones
    answered at 0.97-0.99x, and with other kernels could give another answer to the same request. The probe
    (a second or two) now comes first, and the first load already uses its answer."""
    from app.engine.process import session

    paths.machine_facts_file().unlink(missing_ok=True)
    events: list[str] = []
    runtime = session.Runtime
    monkeypatch.setattr(session, "Runtime", lambda *a, **k: (events.append(f"loaded {k.get('extra_bufts')}"),
                                                             runtime(*a, **k))[1])
    loaded = session.Session.load(LoadOptions(model_path=str(bundled_model), n_ctx=256))
    try:
        remembered = probe.cached_result()
        assert remembered is not None and "background" not in loaded.describe()["extra_bufts_probe"]
        assert events == [f"loaded {remembered['ok']}"]  # one load, with the probe's answer
        assert loaded.describe()["extra_bufts"] is remembered["ok"]
    finally:
        loaded.close()


def test_a_probe_slower_than_the_wait_goes_on_and_the_next_load_uses_it(bundled_model):
    """A machine too busy to probe in FIRST_PROBE_WAIT_S: that one load keeps them off, the probe finishes in
    the background and is remembered."""
    paths.machine_facts_file().unlink(missing_ok=True)
    decision = probe.decision_before_first_load(str(bundled_model), wait_s=0)
    assert decision["background"] is True and decision["ok"] is False
    probe.wait_for_background_probe(120)
    remembered = probe.cached_result()
    assert remembered is not None and "ok" in remembered
    assert probe.decision_before_first_load(str(bundled_model)) == remembered


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
