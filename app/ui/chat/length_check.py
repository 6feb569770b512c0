"""A message too long for the context, said before it is sent (#49.10).

A 4,800-token paste into a 512-token context was explained only after the answer ("4,584 earlier tokens were not
seen"), though its length is known before sending. While the user types or pastes, a message that could be too
long (more characters than half the room, since a token is seldom shorter than a character or two) is counted
by the model's own vocabulary (app.backends.vocab: the vocabulary child, never llama.cpp in the window), off the
window's thread, and a sentence under the box says how much of it the model will not see.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QLabel

from app.ui.bridge.worker import Tasks

SETTLE_MS = 400  # counted once the typing or pasting has settled


def too_long_text(tokens: int, n_ctx: int, answer_room: int) -> str:
    """The sentence for a message of `tokens` where the context holds n_ctx and the answer needs answer_room;
    "" when it fits."""
    room = max(0, n_ctx - answer_room)
    if tokens <= room:
        return ""
    return (f"This message is about {tokens:,} tokens, more than the {n_ctx:,}-token context leaves for it "
            f"({room:,}, with {answer_room:,} kept for the answer): the model will not see about {tokens - room:,} "
            "of them. Shorten it, or load the model with a larger context on the Models page.")


class LengthCheck(QObject):
    def __init__(self, page, label: QLabel):
        """page: the ChatView (its input, bridge, sampling and model path); label: where the sentence goes."""
        super().__init__(page)
        self.page = page
        self.label = label
        self.tasks = Tasks(self)
        self._timer = QTimer(self, singleShot=True, interval=SETTLE_MS, timeout=self.check)
        page.input.textChanged.connect(self._timer.start)
        page.bridge.model_loaded.connect(lambda *_: self._timer.start())
        page.sampling.max_tokens.valueChanged.connect(lambda *_: self._timer.start())
        label.hide()

    def check(self) -> None:
        text = self.page.input.toPlainText()
        info = self.page.bridge.info if self.page.bridge.ready else None
        n_ctx = (info or {}).get("n_ctx")
        answer_room = self.page.sampling.max_tokens.value()
        if not n_ctx or len(text) < max(0, n_ctx - answer_room) / 2:
            self.tasks.drop("length-check")  # a count still running is of an older text
            self._show("")  # cannot be too long: no count needed
            return
        model = self.page._model_path()

        def count() -> int:
            from app.backends.vocab import TokenCounter

            return TokenCounter(model).count(text)

        self.tasks.run(count, lambda tokens: self._show(too_long_text(tokens, n_ctx, answer_room)), None,
                       "length-check", latest=True)

    def _show(self, sentence: str) -> None:
        self.label.setText(sentence)
        self.label.setVisible(bool(sentence))

    def close(self) -> None:
        self._timer.stop()
        self.tasks.close()
