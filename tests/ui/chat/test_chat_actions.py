"""What a user does around an answer: regenerate, edit and resend, presets, copy a code block, delete a chat,
and the window coming back as it was left."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QTextCursor

from tests.ui.conftest import READY_TIMEOUT_MS, ask, chosen_mode, wait_loaded


def roles_and_texts(w) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in w.store.messages(w.chat.conversation_id)]


def test_regenerate_replaces_the_last_answer(qtbot, main_window):
    w = main_window
    first = ask(qtbot, w, "Name a fruit.", max_tokens=12, temperature=1.0)
    w.chat.sampling.seed.setValue(1234)  # a different draw than the first answer's random seed
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=60_000) as again:
        w.chat.regen_button.click()
    messages = roles_and_texts(w)
    assert [r for r, _ in messages] == ["user", "assistant"]  # replaced, not appended
    assert messages[1][1] == again.args[0]["text"] and first["completion_tokens"] > 0
    assert w.chat.transcript.toPlainText().count("Name a fruit.") == 1


def test_edit_and_resend_replaces_the_question_and_its_answer(qtbot, main_window):
    w = main_window
    ask(qtbot, w, "What is the capital of France?", max_tokens=8)
    w.chat.edit_button.click()
    assert w.chat.input.toPlainText() == "What is the capital of France?"
    answer = ask(qtbot, w, "What is the capital of Italy?", max_tokens=8)
    assert roles_and_texts(w) == [("user", "What is the capital of Italy?"), ("assistant", answer["text"])]
    assert "France" not in w.chat.transcript.toPlainText()


def test_presets_set_the_values_and_a_change_makes_them_custom(qtbot, main_window):
    from app.ui.chat.sampling_panel import PRESETS

    panel = main_window.chat.sampling
    panel.preset.setCurrentText("Creative")
    options = panel.options()
    assert (options.temperature, options.top_k, options.top_p) == (1.0, 100, 0.98)
    panel.preset.setCurrentText("Precise")
    assert panel.options().temperature == PRESETS["Precise"]["temperature"]
    panel.temperature.setValue(0.55)
    assert panel.preset.currentText() == "Custom"


def test_copy_link_puts_the_code_block_on_the_clipboard(qtbot, main_window):
    w = main_window
    cid = w.store.create("Code")
    w.store.add_message(cid, "user", "Reverse a string in Python.")
    w.store.add_message(cid, "assistant", "Like this:\n\n```python\ndef rev(s):\n    return s[::-1]\n```\n")
    w.chat.conversations.refresh(select=cid)
    w.chat.open_conversation(cid)
    qtbot.waitUntil(lambda: not w.chat.transcript.loading, timeout=5_000)
    transcript = w.chat.transcript
    assert "def rev(s):" in transcript.toPlainText()
    # Click the "Copy code" link where it is drawn, as a user would.
    cursor = transcript.document().find("Copy code")
    assert not cursor.isNull() and cursor.charFormat().anchorHref().startswith("copy:")
    cursor.setPosition(cursor.selectionStart() + 1, QTextCursor.MoveAnchor)
    point = transcript.cursorRect(cursor).center()
    QGuiApplication.clipboard().clear()
    qtbot.mouseClick(transcript.viewport(), Qt.LeftButton, pos=point)
    qtbot.waitUntil(lambda: QGuiApplication.clipboard().text() != "", timeout=2_000)
    assert QGuiApplication.clipboard().text() == "def rev(s):\n    return s[::-1]"


def test_delete_a_chat_removes_it_from_the_list_and_the_store(qtbot, main_window):
    w = main_window
    ask(qtbot, w, "Hello there.", max_tokens=4)
    cid = w.chat.conversation_id
    titles = lambda: [w.chat.conversations.list.item(i).text()  # noqa: E731
                      for i in range(w.chat.conversations.list.count())]
    assert len(titles()) >= 1
    w.chat.conversations.select(cid)
    w.chat.conversations.delete_current(confirm=False)
    assert w.store.get(cid) is None and w.store.messages(cid) == []
    assert w.chat.conversation_id != cid


def test_the_window_comes_back_with_its_size_model_settings_and_chats(qtbot, hearth_home, model_variant):
    from app.protocol.messages import LoadOptions
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    chosen_mode()  # the full window, as the other window tests (its minimum width is what the check reads)
    make_app([])
    q8 = str(model_variant("Q8_0"))
    first = MainWindow()
    qtbot.addWidget(first)
    first.show()
    wait_loaded(qtbot, first)
    with qtbot.waitSignal(first.bridge.model_loaded, timeout=READY_TIMEOUT_MS):
        first.load_model(LoadOptions(model_path=q8, n_ctx=2048))
    first.resize(780, 720)  # within the offscreen screen (800x800): restoreGeometry keeps a window on its screen
    size = (first.width(), first.height())  # the layout's minimum width may widen it
    assert size[1] == 720
    ask(qtbot, first, "Remember me.", max_tokens=4, temperature=0.35)
    first.close()

    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    wait_loaded(qtbot, second)
    try:
        # The height comes back exactly. The width too, except that the layout's minimum width (about 1,000 px,
        # which depends on the texts shown: a loaded model's, a finished answer's) is above the offscreen screen's
        # 800 px, where Qt clamps to the screen and then to the minimum: never wider than saved, never narrower
        # than the screen allows. (The minimum itself moves while the remembered model loads: the header's
        # tools badge, for one, so the width is held to the screen, not to a minimum read later.)
        assert second.height() == size[1]
        screen = second.screen().availableGeometry().width()
        assert min(size[0], screen) <= second.width() <= size[0]
        assert second.chat.sampling.options().temperature == 0.35
        assert second.bridge.info["path"] == q8 and second.bridge.info["n_ctx"] == 2048
        assert "Remember me." in second.chat.transcript.toPlainText()
    finally:
        second.close()


def test_switching_theme_restyles_the_open_window(qtbot, idle_window):
    """What happens when the system's colour scheme changes (app.ui.shell.app connects colorSchemeChanged to
    apply_theme; the offscreen platform has no colour scheme to change, so the switch is called directly)."""
    from PySide6.QtWidgets import QApplication

    from app.ui.shell.theme import apply_theme

    app = QApplication.instance()
    w = idle_window
    plot = w.monitor.plots["speed"]
    table = w.models.table

    def plot_background():  # a pixel of the painted graph, in its corner
        return plot.grab().toImage().pixelColor(1, 1).lightness()

    def library_text():  # the lightest and darkest pixels of a library row's name, as drawn
        image = table.viewport().grab(table.visualItemRect(table.item(0, 0))).toImage()
        shades = [image.pixelColor(x, y).lightness() for x in range(image.width()) for y in range(image.height())]
        return min(shades), max(shades)

    def code_box():  # the code block's background as drawn, right of its first line
        transcript = w.chat.transcript
        line = transcript.cursorRect(transcript.document().find("def rev(s):"))
        image = transcript.viewport().grab().toImage()
        return image.pixelColor(image.width() - 40, line.center().y()).lightness()

    cid = w.store.create("Code")
    w.store.add_message(cid, "assistant", "Like this:\n\n```python\ndef rev(s):\n    return s[::-1]\n```\n")
    w.chat.conversations.refresh(select=cid)
    w.chat.open_conversation(cid)
    qtbot.waitUntil(lambda: not w.chat.transcript.loading, timeout=5_000)
    assert code_box() > 192
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: table.rowCount() > 0, timeout=20_000)  # rows drawn in the light theme
    apply_theme(app, False)
    table.clearSelection()  # a selected row is drawn in the selection's colours
    try:
        qtbot.waitUntil(lambda: table.viewport().palette().base().color().lightness() > 192, timeout=2_000)
        assert library_text()[0] < 64  # dark text on light
        assert apply_theme(app, True) is True
        assert app.palette().window().color().lightness() < 64
        assert plot_background() < 64
        table.clearSelection()
        qtbot.waitUntil(lambda: table.viewport().palette().base().color().lightness() < 64, timeout=2_000)
        assert library_text()[1] > 160 and library_text()[0] < 64, "light text on the dark background (#31.8)"
        assert code_box() < 64, "a code block drawn before the switch takes the dark box too"
        assert apply_theme(app, False) is False
        assert app.palette().window().color().lightness() > 192
        assert plot_background() > 192
        qtbot.waitUntil(lambda: code_box() > 192, timeout=2_000)
    finally:
        apply_theme(app)


def test_a_last_model_that_is_gone_starts_the_bundled_one_and_says_so(qtbot, hearth_home, tmp_path, bundled_model):
    from app.ui.settings.store import load_settings, save_settings
    from app.protocol.messages import LoadOptions
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    settings = load_settings()
    settings["load_options"] = LoadOptions(model_path=str(tmp_path / "moved-away.gguf")).to_dict()
    save_settings(settings)
    make_app([])
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    try:
        assert "moved-away.gguf" in window.statusBar().currentMessage()
        wait_loaded(qtbot, window)
        assert window.bridge.info["path"] == str(bundled_model)
    finally:
        window.close()


def test_settings_of_the_wrong_type_are_reset_and_kept_aside(qtbot, hearth_home, bundled_model):
    """#18 item 8: a hand-edited settings file never stops the window; what was wrong is said and kept."""
    import json

    from app.core import paths
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    path = paths.settings_file()
    path.write_text(json.dumps({"sampling": {"temperature": "hot", "top_k": 7},
                                "load_options": {"n_ctx": "abc", "model_path": 12345},
                                "imported_models": 5, "window_geometry": 3}), encoding="utf-8")
    make_app([])
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    try:
        assert any("imported_models" in p and "window_geometry" in p for p in window.settings_problems)
        assert "n_ctx" in window.statusBar().currentMessage() and "model_path" in window.statusBar().currentMessage()
        wait_loaded(qtbot, window)
        assert window.bridge.info["path"] == str(bundled_model)
        sampling = window.chat.sampling.options()
        assert sampling.top_k == 7 and sampling.temperature != "hot"  # the good value kept, the bad one reset
        kept = list(path.parent.glob(path.name + ".bad-*"))
        assert len(kept) == 1 and json.loads(kept[0].read_text())["imported_models"] == 5
    finally:
        window.close()


def test_a_damaged_chat_history_does_not_stop_the_window(qtbot, hearth_home):
    from app.core import paths
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    paths.chats_db().write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)  # a header, then garbage
    make_app([])
    window = MainWindow(load_on_start=False)
    qtbot.addWidget(window)
    window.show()
    try:
        assert "The chat history was damaged" in window.statusBar().currentMessage()
        assert list(paths.chats_db().parent.glob(paths.chats_db().name + ".damaged-*"))
        cid = window.store.create("a new chat")
        assert window.store.get(cid).title == "a new chat"
    finally:
        window.close()
