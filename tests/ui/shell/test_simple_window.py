"""#55 A: the window a newcomer meets is the simple one: the chats, the conversation with a welcome that names the
model and offers example prompts, the message box, the model picker and Attach, sampling as one preset; the full
window is one choice away (offered at the first start, kept in Settings, in View), and the choice is kept."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QUrl

from app.ui.shell import window_mode
from tests.ui.conftest import opened_window


@pytest.fixture
def first_start(qtbot, hearth_home):
    """A first start: nothing chosen yet, the bundled model loading."""
    with opened_window(qtbot, mode=None) as window:
        yield window


def visible_tabs(w) -> list[str]:
    return [w.tabs.tabText(i) for i in range(w.tabs.count()) if w.tabs.isTabVisible(i)]


def test_a_first_start_is_the_simple_window_with_a_welcome_and_the_offer(qtbot, first_start):
    w = first_start
    assert w.simple and w.mode_offer.isVisible()
    chat = w.chat
    # The chats, the conversation, the message box, the picker, Attach; sampling as one preset.
    for shown in (chat.conversations, chat.transcript, chat.input, chat.picker, chat.attach_bar, chat.sampling.preset):
        assert shown.isVisible(), shown
    for hidden in (chat.system_prompt, chat.sampling.temperature, chat.sampling.top_k, chat.picker.tools_badge):
        assert not hidden.isVisible(), hidden
    assert visible_tabs(w) == ["Chat", "Models", "Documents"]
    # The monitor folds into the status bar's figures; Graphs opens it.
    assert not w.monitor_dock.isVisible() and w.status.graphs.isVisible()
    w.status.graphs.click()
    assert w.monitor_dock.isVisible()
    # The welcome names the model, says what it is good and bad at, and offers prompts that fill the box.
    qtbot.waitUntil(lambda: chat.transcript.welcoming, timeout=5_000)
    text = chat.transcript.toPlainText()
    assert "SmolLM2-135M-Instruct" in text and "small model" in text and "wrong about facts" in text
    assert len(chat.transcript.examples) == 3
    chat.transcript._on_anchor(QUrl("example:1"))
    assert chat.input.toPlainText() == chat.transcript.examples[1]
    # Nothing a newcomer must understand first: no shell command, no KLD, no sinks, no buffer types.
    for words in ("`", "KLD", "sink", "buffer type"):
        assert words not in text


def test_the_models_page_keeps_its_details_behind_show_details(qtbot, first_start):
    w = first_start
    models = w.models
    w.tabs.setCurrentWidget(models)
    assert models.table.isVisible() and models.load_button.isVisible() and models.import_button.isVisible()
    assert models.fit_label.isVisible() and models.fit_label.text()
    assert not models.making.isVisible() and not models.load_details.isVisible()
    assert [models.sources.tabText(i) for i in range(models.sources.count()) if models.sources.isTabVisible(i)] \
        == ["Library", "Download"]
    models.details_button.click()
    assert models.making_scroll.isVisible() and models.load_details.isVisible()
    assert models.details_button.text() == "Hide details"


def test_show_everything_is_kept_and_the_next_start_opens_full(qtbot, first_start):
    from app.ui.settings.store import load_settings
    from app.ui.shell.main_window import MainWindow

    w = first_start
    full = [b for b in w.mode_offer.findChildren(type(w.status.graphs)) if b.text() == "Show everything"][0]
    full.click()
    assert not w.simple and not w.mode_offer.isVisible()
    assert w.chat.system_prompt.isVisible() and w.chat.sampling.temperature.isVisible()
    assert "Server" in visible_tabs(w) and w.monitor_dock.isVisible() and not w.status.graphs.isVisible()
    assert load_settings()[window_mode.SETTING] == window_mode.FULL
    w.close()
    again = MainWindow(load_on_start=False)
    qtbot.addWidget(again)
    again.show()
    try:
        assert not again.simple and not again.mode_offer.isVisible() and "Server" in visible_tabs(again)
        # And back, from the View menu.
        again.full_action.trigger()
        assert again.simple and visible_tabs(again) == ["Chat", "Models", "Documents"]
        assert load_settings()[window_mode.SETTING] == window_mode.SIMPLE
    finally:
        again.close()


def test_the_welcome_gives_way_to_the_first_message(qtbot, first_start):
    from tests.ui.conftest import ask

    w = first_start
    qtbot.waitUntil(lambda: w.chat.transcript.welcoming, timeout=5_000)
    ask(qtbot, w, "Name three colors.", max_tokens=8)
    text = w.chat.transcript.toPlainText()
    assert not w.chat.transcript.welcoming and "Try one" not in text and "Name three colors." in text
    w.chat.new_conversation()
    assert w.chat.transcript.welcoming
