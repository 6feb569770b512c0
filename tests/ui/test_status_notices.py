"""The status bar's notice: what a load changed on its own (the extra-buffer probe, a context policy)."""

from __future__ import annotations

from app.engine.protocol import LoadOptions


def test_the_status_bar_names_what_a_context_policy_changed_at_load(bundled_model):
    """The engine's own description of a load (Session.describe, as the window receives it) with h2o: the status
    bar's notice names the policy and its tooltip says flash attention is off; the window policy adds nothing."""
    from app.engine.h2o import FLASH_OFF_NOTICE
    from app.engine.session import Session
    from app.ui.main_window import load_notices

    for policy in ("h2o", "window"):
        session = Session.load(LoadOptions(model_path=str(bundled_model), n_ctx=256, n_threads=1,
                                           context_policy=policy))
        try:
            short, sentences = load_notices(session.describe())
        finally:
            session.close()
        if policy == "h2o":
            assert "Context policy h2o" in short and FLASH_OFF_NOTICE in sentences
        else:
            assert "Context policy" not in short and FLASH_OFF_NOTICE not in sentences


def test_a_first_start_s_notice_says_the_probe_has_not_answered_yet(monkeypatch, bundled_model):
    """On a machine never probed the load runs with extra buffer types off while the probe runs: nothing crashed,
    and the sentence must not say so (it did)."""
    from app.engine import probe
    from app.ui.main_window import extra_bufts_notice

    monkeypatch.setattr(probe, "cached_result", lambda: None)  # this machine's answer is shared by the suite
    decision = probe.decision_or_background_probe(str(bundled_model), start_probe=False)
    text = extra_bufts_notice({"extra_bufts": False, "extra_bufts_probe": decision})
    assert "first load" in text and "crashed" not in text
    crashed = {"ok": False, "detail": "SIGILL"}
    assert "crashed in a test run (SIGILL)" in extra_bufts_notice({"extra_bufts": False, "extra_bufts_probe": crashed})
