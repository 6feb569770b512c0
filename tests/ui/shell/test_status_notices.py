"""The status bar's notices (#49.14): one model (app/ui/widgets/notices.py) behind every sentence the bar says. A good
outcome clears the error of its cause, a long notice ends in "…" and is whole on hover and click, and what a
load changed on its own is worded for a user (a first start's check is news, not an orange warning)."""

from __future__ import annotations

import struct

from PySide6.QtCore import Qt

from app.ui.widgets.notices import ERROR, INFO, WARNING
from app.protocol.messages import LoadOptions

WAIT_MS = 10_000


def test_the_status_bar_names_what_a_context_policy_changed_at_load(bundled_model):
    """The engine's own description of a load (Session.describe, as the window receives it) with h2o: a warning
    that says flash attention is off, for as long as the model is loaded; the window policy adds nothing."""
    from app.engine.context.h2o import FLASH_OFF_NOTICE
    from app.engine.process.session import Session
    from app.ui.shell.load_notices import load_notices

    for policy in ("h2o", "window"):
        session = Session.load(LoadOptions(model_path=str(bundled_model), n_ctx=256, n_threads=1,
                                           context_policy=policy))
        try:
            notices = [n for n in load_notices(session.describe()) if n.cause == "load.policy"]
        finally:
            session.close()
        if policy == "h2o":
            assert [(n.text, n.severity, n.lifetime) for n in notices] == [(FLASH_OFF_NOTICE, WARNING, None)]
            assert "h2o" in notices[0].detail
        else:
            assert notices == []


def test_a_first_start_s_notice_is_news_in_plain_words(monkeypatch, bundled_model):
    """On a machine never probed whose probe takes longer than the first load waits for it (#49.11), that load
    runs with extra buffer types off while the probe goes on: a normal one-time state. It said "Extra buffer types off" in orange beside "Ready"; now it is INFO, in words a new
    user reads, and it goes by itself. A probe that crashed says so in the detail."""
    from app.engine.probes import probe
    from app.ui.shell.load_notices import extra_bufts_notice

    monkeypatch.setattr(probe, "cached_result", lambda: None)  # this machine's answer is shared by the suite
    decision = probe.decision_or_background_probe(str(bundled_model), start_probe=False)
    notice = extra_bufts_notice({"extra_bufts": False, "extra_bufts_probe": decision})
    assert notice.severity == INFO and notice.lifetime is not None
    assert notice.text.startswith("First start") and "buffer" not in notice.text.lower()
    assert "first load" in notice.detail and "crashed" not in notice.whole
    crashed = extra_bufts_notice({"extra_bufts": False, "extra_bufts_probe": {"ok": False, "detail": "SIGILL"}})
    assert crashed.severity == INFO and "crashed in a test run (SIGILL)" in crashed.detail
    assert extra_bufts_notice({"extra_bufts": True}) is None


def shown(bar) -> str:
    """What the bar's notice label paints (ElidedLabel.text() is the whole text)."""
    from PySide6.QtWidgets import QLabel

    return QLabel.text(bar.label)


def test_a_long_notice_ends_in_an_ellipsis_and_is_whole_on_hover_and_click(qtbot, main_window):
    """At 1024 px with a model loaded: QStatusBar's own message cut a sentence mid-word with no ellipsis. The
    notice is elided with "…", its tooltip and the box a click opens hold it whole, and the window stays 1024
    wide. A first start's notice has the palette's own colour; an error is red."""
    w = main_window
    w.resize(1024, 700)
    qtbot.waitUntil(lambda: w.width() == 1024, timeout=2_000)
    first = {**w.bridge.info, "extra_bufts": False, "extra_bufts_probe": {"background": True}}
    w._on_model_loaded(first)
    assert w.notices.notice().severity == INFO and w.notices.label.styleSheet() == ""
    assert "Extra buffer types off" not in shown(w.notices)
    sentence = ("The model could not be loaded: llama.cpp refused the file, possibly for lack of memory; "
                "close other programs or choose a smaller context, then load it again. ") * 2
    w.show_message(sentence, ERROR, "load.failed")
    qtbot.wait(50)  # the layout's turn
    assert w.width() == 1024
    painted = shown(w.notices)
    assert painted.endswith("…") and len(painted) < len(sentence)
    assert "#ef4444" in w.notices.label.styleSheet()
    assert "possibly for lack of memory" in w.notices.label.toolTip() and "Error" in w.notices.label.toolTip()
    qtbot.mouseClick(w.notices.label, Qt.LeftButton)
    box = w.notices.box
    qtbot.waitUntil(lambda: box.isVisible(), timeout=2_000)
    assert box.text() == sentence
    box.close()
    # The user asks for a load again: the failed load's error is answered, the first start's news shows again.
    w.load_chosen_model(w.bridge.options)
    assert w.notices.board.of("load.failed") is None
    qtbot.waitUntil(lambda: w.bridge.ready and not w.bridge.loading, timeout=60_000)


def test_a_failed_import_s_error_goes_when_the_next_import_succeeds(qtbot, idle_window, model_variant, tmp_path):
    """A failed model import's error stayed on the bar after a good import; the same for a chat import."""
    w = idle_window
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(b"GGUF" + b"\x1c\x1c\x00-" + struct.pack("<QQ", 0, 0) + b"\0" * 64)
    with qtbot.waitSignal(w.models.noticed, timeout=WAIT_MS):
        w.models.import_file(str(damaged))
    assert "damaged.gguf is a damaged file" in w.statusBar().currentMessage()
    assert w.notices.notice().severity == ERROR
    q8 = str(model_variant("Q8_0"))
    with qtbot.waitSignal(w.models.noticed, timeout=WAIT_MS):
        w.models.import_file(q8)
    assert w.statusBar().currentMessage() == "Imported smollm2-135m-Q8_0.gguf; it is selected in the library."
    assert all("damaged" not in n.text for n in w.notices.board.alive())

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert w.import_chat(str(broken)) is None
    assert w.notices.notice().severity == ERROR and "broken.json" in w.statusBar().currentMessage()
    good = tmp_path / "chat.json"
    good.write_text('{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}')
    assert w.import_chat(str(good)) is not None
    assert all("broken.json" not in n.text for n in w.notices.board.alive())
    assert w.statusBar().currentMessage().startswith("Imported")
