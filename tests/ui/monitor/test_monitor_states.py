"""#17: the monitor says when it generates, leaves gaps between answers, draws the engine's memory from the
load on, keeps legends off the data, never wraps inside a unit, and says what the engine decided about
speculative decoding (here and on the Models page)."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt

from tests.ui.conftest import ask


def test_the_monitor_follows_an_answer_and_leaves_a_gap_after_it(qtbot, main_window):
    w = main_window
    m = w.monitor
    # Before any answer the engine's memory is a line (two or more points), not one dot.
    qtbot.waitUntil(lambda: len(m.series["engine_mb"].v) >= 2, timeout=5_000)
    assert "generation" in m.plots["speed"].title
    w.chat.sampling_overrides = {"ignore_eos": True}
    seen: list[str] = []
    w.bridge.stats_received.connect(lambda _s: seen.append(m.summary.text()))
    ask(qtbot, w, "Tell me a story.", max_tokens=120, wait=False)
    assert m.summary.text() == "Generating…"
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000):
        pass
    assert seen and all(text.startswith("Generating…") for text in seen)
    summary = m.summary.text()
    assert "tok/s" not in summary and "tok/\u2060s" in summary  # no line break inside the unit
    assert summary.replace("\u00a0", " ").replace("\u2060", "").startswith("Last answer: 120 tokens at")
    assert math.isnan(m.series["gen_tok_s"].v[-1])  # the next answer's line starts afresh
    # A new chat does not keep the last answer's speed and context fill in the status bar.
    assert "tok/s" in w.speed_label.text() and "/" in w.ctx_label.text()
    qtbot.mouseClick(w.chat.conversations.new_button, Qt.LeftButton)
    assert w.speed_label.text() == "" and w.ctx_label.text() == f"context {w.bridge.info['n_ctx']}"


def check_speculation_is_said(qtbot, w, info: dict) -> None:
    """After a load with a drafter (test_monitor.py's draft-graph test loads one: calibrating takes ~15 s)."""
    said = w.models.speculation.text()
    title = w.monitor.plots["draft"].title.replace("<br>", " ")  # a note wraps in the narrow dock
    reason = info.get("spec_plain_reason")
    if reason:  # the engine decided drafting cannot pay on this machine: say so, with its reason
        assert f"is not used: {reason}" in said and f"not used: {reason}" in title
    else:
        assert "is on" in said
    done = ask(qtbot, w, "Repeat: the cat sat on the mat, the cat sat on the mat.", max_tokens=24)
    summary = w.monitor.summary.text().replace("\u00a0", " ").replace("\u2060", "")
    assert "acceptance 0%" not in summary
    if done["spec"].get("plain_reason"):
        assert f"speculative decoding not used: {done['spec']['plain_reason']}" in summary
    elif not done["spec"].get("drafted"):
        assert "speculative decoding drafted no tokens" in summary
    else:
        assert "speculative decoding accepted" in summary


def test_the_sentences_for_a_drafter_that_cannot_pay():
    from app.ui.models.speculation_text import answer_text, loaded_text

    reason = "a draft token costs 37% of a target step; above 33% drafting cannot pay"
    assert loaded_text({"drafter": "draft model", "spec_plain_reason": reason}) == (
        f"Speculative decoding (draft model) is not used: {reason}. Answers run at plain speed.")
    assert answer_text({"drafted": 0, "acceptance": 0.0, "plain_reason": reason}) == f"not used: {reason}"
    # #55 D3: nothing accepted is no speed-up, whatever the cost model estimated; counts agree with the header's.
    assert answer_text({"drafted": 150, "accepted": 0, "speedup": 1.45}) == "accepted 0 of 150 drafted tokens (0%)"
    assert answer_text({"drafted": 150, "accepted": 2, "speedup": 1.45}) == \
        "accepted 2 of 150 drafted tokens (1%), about 1.45x plain speed"
    assert loaded_text({"drafter": None}) == "Speculative decoding is off."


def test_a_crash_of_an_idle_engine_does_not_say_an_answer_did_not_finish(qtbot, main_window):
    """#49.7: after a kill -9 of an engine that had finished its answer long before, the monitor said "The last
    answer did not finish"."""
    import os
    import signal

    w = main_window
    m = w.monitor
    ask(qtbot, w, "Say hello.", max_tokens=4)
    assert m.summary.text().startswith("Last answer")
    with qtbot.waitSignals([w.bridge.engine_crashed, w.bridge.model_loaded], order="strict", timeout=90_000):
        os.kill(w.bridge.pid, signal.SIGKILL)
    assert "did not finish" not in m.summary.text()
    # #55 D2: the sentence holds while it is true; once the engine is ready again it says what happened, in the
    # past (it said "is restarting" until the next answer), and the status bar shows the new engine's figures.
    qtbot.waitUntil(lambda: m.summary.text() == "The engine stopped between answers and restarted; no answer was "
                    "cut off.", timeout=10_000)
    assert "SIGKILL" in m.summary.toolTip()
    assert "did not finish" not in w.chat.hint.text()


def test_after_eject_and_load_the_monitor_and_the_status_bar_agree(qtbot, main_window):
    """#55 D1: after Eject then Load the monitor said "No model loaded" while the status bar said Ready."""
    w = main_window
    m = w.monitor
    w.bridge.unload()
    qtbot.waitUntil(lambda: m.summary.text() == "No model loaded", timeout=5_000)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=60_000):
        w.load_model(w.models.options_for(w.chat.picker.combo.currentData()))
    qtbot.waitUntil(lambda: w.status.state.text().startswith("Ready"), timeout=10_000)
    qtbot.waitUntil(lambda: m.summary.text() != "No model loaded", timeout=5_000)
    assert m.summary.text() == "Idle"
