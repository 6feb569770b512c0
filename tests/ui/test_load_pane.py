"""#17: the load settings warn about a context beyond the trained one, offer the library's draft models that
share the vocabulary, and say what the engine decided about speculative decoding."""

from __future__ import annotations


def choose_first_model(qtbot, w) -> None:
    w.tabs.setCurrentWidget(w.models)
    qtbot.waitUntil(lambda: w.models.selected_path() is not None, timeout=10_000)
    qtbot.waitUntil(lambda: w.models.load_settings.trained_ctx is not None, timeout=10_000)


def test_a_context_above_the_trained_one_is_marked_and_warned(qtbot, idle_window):
    w = idle_window
    choose_first_model(qtbot, w)
    settings = w.models.load_settings
    assert settings.trained_ctx == 8192
    settings.ctx.setCurrentIndex(settings.ctx.findData(4096))
    assert settings.ctx_warning.isHidden()
    index = settings.ctx.findData(131072)
    assert settings.ctx.itemText(index) == "131,072 tokens (above trained)"
    settings.ctx.setCurrentIndex(index)
    assert not settings.ctx_warning.isHidden() and "trained on 8,192 tokens" in settings.ctx_warning.text()
