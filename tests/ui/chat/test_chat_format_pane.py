"""#29 in the window: the load settings choose a model's chat template (auto, plain, a llama.cpp built-in, a Jinja
file), kept per model like its other load settings; after a load the pane says which chat format the model got
and why, and labels a base model as such."""

from __future__ import annotations

from PySide6.QtWidgets import QFileDialog

from tests.helpers.gguf_edit import TEMPLATE_KEY, copy_without
from tests.helpers.templates import CHATML
from tests.ui.conftest import shot
from tests.ui.bridge.test_load_states import select_in_library

LOAD_TIMEOUT_MS = 60_000


def load_chosen(qtbot, w) -> dict:
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=LOAD_TIMEOUT_MS) as loaded:
        w.models.load_button.click()
    return loaded.args[0]


def choose_template(settings, data) -> None:
    """As a user does: pick the entry (activated is what a click or a key sends)."""
    index = settings.template.findData(data)
    settings.template.setCurrentIndex(index)
    settings.template.activated.emit(index)


def test_the_chat_format_is_said_a_base_model_labelled_and_a_template_chosen_is_kept_per_model(
        qtbot, main_window, bundled_model, tmp_path, monkeypatch):
    w = main_window
    models, settings = w.models, w.models.load_settings
    w.tabs.setCurrentWidget(models)
    qtbot.waitUntil(lambda: models.loaded_note.text() != "", timeout=10_000)
    assert models.loaded_note.text().startswith("Chat format: the model's own. The model file carries its own chat "
                                                "template.")
    assert "Base model" not in models.loaded_note.text()

    # A copy without a template whose names say nothing of chat: a base model, prompted with the built-in
    # template its vocabulary's turn markers name.
    base = copy_without(bundled_model, tmp_path / "smollm2-135m-base.gguf", TEMPLATE_KEY)
    select_in_library(qtbot, w, base)
    assert settings.template.currentData() == "auto"
    info = load_chosen(qtbot, w)
    assert info["chat_format"]["kind"] == "builtin" and info["chat_format"]["base_model"]
    note = models.loaded_note.text()
    assert note.startswith("Chat format: chatml. The file has no chat template; its vocabulary has <|im_start|> "
                           "<|im_end|>, the turn markers of llama.cpp's built-in 'chatml' template.")
    assert "Base model: nothing in the file says it was tuned to chat" in note
    assert models.loaded_note.isVisibleTo(w)
    qtbot.wait(50)  # the pane's relayout for the new sentences
    shot(w, "chat-format-base", tmp_path)

    # A Jinja file, picked through the file dialog.
    template = tmp_path / "my-chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *_a, **_k: (str(template), ""))
    choose_template(settings, None)  # "Jinja file…"
    assert settings.template.currentText() == "my-chatml.jinja"
    assert settings.options(str(base)).chat_template == str(template)
    info = load_chosen(qtbot, w)
    assert info["chat_format"]["kind"] == "file"
    assert models.loaded_note.text().startswith(f"Chat format: my-chatml.jinja. Chosen by you: the Jinja template in "
                                                f"{template}.")

    # A cancelled file dialog leaves the choice as it was.
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *_a, **_k: ("", ""))
    choose_template(settings, None)
    assert settings.template.currentData() == str(template)

    # Per model: the bundled model keeps auto, the copy its file.
    paths = [m["path"] for m in models.models]
    models.table.selectRow(paths.index(str(bundled_model)))
    assert settings.template.currentData() == "auto"
    choose_template(settings, "plain")
    models.table.selectRow(paths.index(str(base)))
    assert settings.template.currentData() == str(template)
    assert models.per_model[str(base)]["chat_template"] == str(template)
    models.table.selectRow(paths.index(str(bundled_model)))
    assert settings.template.currentData() == "plain"  # changed and not loaded yet: kept for when it comes back
    info = load_chosen(qtbot, w)
    assert info["chat_format"]["kind"] == "plain"
    assert models.loaded_note.text().startswith("Chat format: plain text. Chosen by you: plain 'User:' / "
                                                "'Assistant:' text.")
