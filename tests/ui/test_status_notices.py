"""The status bar's notice: what a load changed on its own (the extra-buffer probe, a context policy)."""

from __future__ import annotations

from app.protocol.messages import LoadOptions


def test_the_status_bar_names_what_a_context_policy_changed_at_load(bundled_model):
    """The engine's own description of a load (Session.describe, as the window receives it) with h2o: the status
    bar's notice names the policy and its tooltip says flash attention is off; the window policy adds nothing."""
    from app.engine.context.h2o import FLASH_OFF_NOTICE
    from app.engine.process.session import Session
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
    from app.engine.probes import probe
    from app.ui.main_window import extra_bufts_notice

    monkeypatch.setattr(probe, "cached_result", lambda: None)  # this machine's answer is shared by the suite
    decision = probe.decision_or_background_probe(str(bundled_model), start_probe=False)
    text = extra_bufts_notice({"extra_bufts": False, "extra_bufts_probe": decision})
    assert "first load" in text and "crashed" not in text
    crashed = {"ok": False, "detail": "SIGILL"}
    assert "crashed in a test run (SIGILL)" in extra_bufts_notice({"extra_bufts": False, "extra_bufts_probe": crashed})


def test_a_long_notice_never_widens_the_window(qtbot, main_window):
    """At 1024 px with a model loaded, the status bar's notice and the chat's tools badge are elided to the room
    they have (their tooltips keep the sentences). The badge at its whole width made the window 1138 px wide,
    past a 1024-px screen (test_which_model_runs saw it when the badge came in before its resize)."""
    w = main_window
    qtbot.waitUntil(lambda: w.bridge.ready, timeout=60_000)
    w.resize(1024, 700)
    qtbot.waitUntil(lambda: w.width() == 1024, timeout=2_000)
    info = {**w.bridge.info, "extra_bufts": False, "extra_bufts_probe": {"ok": False, "detail": "SIGILL"},
            "window": {"policy": "h2o", "notice": "Flash attention is off: h2o reads the attention scores. " * 3}}
    w._on_model_loaded(info)
    w.notice_label.setText(w.notice_label.text() + " · " + "a much longer notice than any so far " * 4)
    qtbot.wait(50)  # the layout's turn
    assert w.width() == 1024
    assert w.notice_label.text().startswith("Extra buffer types off")  # the whole text, shown elided
    assert "SIGILL" in w.notice_label.toolTip()
    # The chat's tools badge beside the picker gives way too: a pill with room for its text, or no pill at all.
    badge = w.chat.picker.tools_badge
    assert badge.text() and (badge.width() >= badge.ROOM or badge.styleSheet() == "")
