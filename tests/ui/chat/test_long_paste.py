"""A message too long for the context is said before it is sent (#49.10), from the model's own token count."""

from __future__ import annotations

WAIT_MS = 20_000


def test_a_long_paste_into_a_small_context_is_said_before_sending(qtbot, main_window):
    from app.backends.vocab import TokenCounter

    w = main_window
    n_ctx = w.bridge.info["n_ctx"]
    w.chat.sampling.max_tokens.setValue(64)
    paste = "The quick brown fox jumps over the lazy dog. " * (n_ctx // 5)
    tokens = TokenCounter(w.bridge.info["path"]).count(paste)
    assert tokens > n_ctx
    w.chat.input.setPlainText(paste)
    qtbot.waitUntil(lambda: w.chat.too_long.isVisibleTo(w.chat), timeout=WAIT_MS)
    said = w.chat.too_long.text()
    assert said.startswith(f"This message is about {tokens:,} tokens, more than the {n_ctx:,}-token context")
    assert f"about {tokens - (n_ctx - 64):,} of them" in said
    w.chat.input.setPlainText("A short question.")
    qtbot.waitUntil(lambda: not w.chat.too_long.isVisibleTo(w.chat), timeout=WAIT_MS)
