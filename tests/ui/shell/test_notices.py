"""The status bar's one model of notices (app/ui/widgets/notices.py), headless: a cause's newer notice replaces its
older one, clearing a cause takes its notice away, lifetimes end by the clock, and the newest notice alive is
the one shown."""

from __future__ import annotations

import pytest

from app.ui.widgets.notices import ERROR, INFO, UNTIL_CLEARED, WARNING, Notice, NoticeBoard, cleared


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_good_outcome_replaces_the_error_of_the_same_cause():
    board = NoticeBoard(Clock())
    board.post(Notice("x.gguf is a damaged file.", ERROR, "models.import"))
    board.post(Notice("Imported y.gguf; it is selected in the library.", INFO, "models.import"))
    assert [n.text for n in board.alive()] == ["Imported y.gguf; it is selected in the library."]
    board.post(Notice("The server refused the key.", ERROR, "connections"))
    board.post(cleared("connections"))  # a later test that worked
    assert board.of("connections") is None and board.current().cause == "models.import"


def test_clearing_a_cause_clears_the_causes_under_it():
    board = NoticeBoard(Clock())
    board.post(Notice("The h2o policy turned flash attention off.", WARNING, "load.policy", UNTIL_CLEARED))
    board.post(Notice("First start: checking…", INFO, "load.bufts"))
    board.post(Notice("Loading refused.", ERROR, "loader"))  # a cause that only starts with the same letters
    assert board.clear("load") and [n.cause for n in board.alive()] == ["loader"]
    assert not board.clear("load")


def test_lifetimes_end_by_the_clock_and_a_lasting_notice_comes_back():
    clock = Clock()
    changes = []
    board = NoticeBoard(clock)
    board.add_listener(lambda: changes.append(board.current()))
    board.post(Notice("The policy changed a setting.", WARNING, "load.policy", UNTIL_CLEARED))
    board.post(Notice("Copied to the clipboard", INFO, "copied", 2))
    assert board.current().text == "Copied to the clipboard" and board.next_expiry() == pytest.approx(2)
    clock.now += 2.5
    assert board.current().text == "The policy changed a setting." and board.next_expiry() is None
    assert len(changes) == 2
    board.post(Notice("An error to read.", ERROR))  # the severity's own lifetime
    clock.now += 29
    assert board.current().text == "An error to read."
    clock.now += 2
    assert board.current().cause == "load.policy"


def test_the_same_sentence_without_a_cause_is_one_notice_and_the_user_can_dismiss_passing_ones():
    clock = Clock()
    board = NoticeBoard(clock)
    board.post(Notice("Hearth hit an internal error."))
    clock.now += 5
    board.post(Notice("Hearth hit an internal error."))
    assert len(board.alive()) == 1 and board.next_expiry() == pytest.approx(10)
    board.post(Notice("It stays.", WARNING, "stays", UNTIL_CLEARED))
    board.clear_all_passing()
    assert [n.text for n in board.alive()] == ["It stays."]


def test_a_notice_says_its_detail_whole_and_refuses_a_severity_it_does_not_know():
    assert Notice("Short.", detail="The long story.").whole == "Short.\n\nThe long story."
    assert Notice("Short.", detail="Short.").whole == "Short."
    with pytest.raises(ValueError):
        Notice("x", "orange")
