"""The transcript follows the answer while the user is at the bottom; scrolling up stops that and shows a
"Jump to latest" button, which (like scrolling back to the bottom) resumes it. The scroll bar's own range
changes do the following, so a relayout that comes after an append (Qt lays out large documents in steps) is
followed too. A mixin of Transcript (app/ui/chat/transcript.py)."""

from __future__ import annotations

from contextlib import contextmanager

AT_BOTTOM_PX = 4  # this close to the end counts as at the end: following


class Following:
    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        self._moving += 1
        try:
            bar.setValue(bar.maximum())
        finally:
            self._moving -= 1

    def jump_to_latest(self) -> None:
        """Scroll to the end and follow what arrives (the "Jump to latest" button)."""
        self._set_following(True)
        self._scroll_to_end()

    @contextmanager
    def _moving_text(self):
        """Text is inserted or replaced: a following view ends at the end; one the user scrolled up stays where
        it was, even while the text below it is taken out and put back (which would clamp it to the end)."""
        bar = self.verticalScrollBar()
        kept = bar.value()
        self._moving += 1
        try:
            yield
        finally:
            self._moving -= 1
        if self.following:
            self._scroll_to_end()
        elif bar.value() != kept:
            self._moving += 1
            bar.setValue(kept)
            self._moving -= 1

    def _on_range_changed(self, _low: int, _high: int) -> None:
        # Qt lays a long document out in steps after an insert: the end moves later, and is followed then.
        if self.following:
            self._scroll_to_end()

    def _on_scrolled(self, value: int) -> None:
        if not self._moving:  # the user (wheel, keys, the scroll bar): follow only from the end
            self._set_following(value >= self.verticalScrollBar().maximum() - AT_BOTTOM_PX)

    def _set_following(self, on: bool) -> None:
        self.following = on
        if self.jump_button.isHidden() != on:
            self.jump_button.setVisible(not on)
            self._place_jump_button()

    def _place_jump_button(self) -> None:
        button = self.jump_button
        button.adjustSize()
        area = self.viewport().geometry()
        button.move(area.x() + (area.width() - button.width()) // 2, area.bottom() - button.height() - 10)
        button.raise_()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._place_jump_button()
