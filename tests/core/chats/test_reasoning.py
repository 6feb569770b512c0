"""The one parser of reasoning models' <think>…</think> (app/core/chats/reasoning.py), fed as a token stream."""

from __future__ import annotations

import pytest

from app.core.chats.reasoning import ReasoningSplitter, prompt_opens_thinking, split, without_reasoning


def streamed(pieces, opened=False):
    s = ReasoningSplitter(opened)
    reasoning, content = [], []
    for piece in pieces:
        r, c = s.feed(piece)
        reasoning.append(r)
        content.append(c)
    r, c = s.finish()
    reasoning.append(r)
    content.append(c)
    return "".join(reasoning), "".join(content), s


ANSWER = "<think>\nLet me add 2 and 2.\n</think>\n\nIt is 4."


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, len(ANSWER)])
def test_tags_split_across_tokens_at_any_point(size):
    pieces = [ANSWER[i:i + size] for i in range(0, len(ANSWER), size)]
    reasoning, content, s = streamed(pieces)
    assert reasoning.strip() == "Let me add 2 and 2."
    assert content == "It is 4."
    assert s.split().reasoning == "Let me add 2 and 2." and not s.thinking


def test_no_tag_text_ever_reaches_either_part_even_one_character_at_a_time():
    s = ReasoningSplitter()
    for ch in ANSWER:
        r, c = s.feed(ch)
        assert "<" not in r + c and ">" not in r + c
    s.finish()


def test_no_thinking_at_all_is_all_content_and_is_not_held_back():
    s = ReasoningSplitter()
    assert s.feed("Hello") == ("", "Hello")
    assert s.feed(" there") == ("", " there")
    assert s.finish() == ("", "")
    assert split("Hello there").reasoning == "" and split("Hello there").content == "Hello there"


def test_a_lone_angle_bracket_is_held_only_until_it_cannot_be_a_tag():
    s = ReasoningSplitter()
    assert s.feed("a <") == ("", "a ")
    assert s.feed("b") == ("", "<b")
    assert s.feed(" <thi") == ("", " ")
    assert s.finish() == ("", "<thi")  # the answer ended: it was text after all


def test_unterminated_thinking_is_all_reasoning_and_says_it_is_still_thinking():
    reasoning, content, s = streamed(["<th", "ink>I am still", " wondering </th"])
    assert content == ""
    assert reasoning == "I am still wondering </th"
    assert s.thinking
    partial = split("<think>still going")
    assert partial.thinking and partial.reasoning == "still going" and partial.content == ""


def test_answer_that_starts_inside_thinking_opened_by_the_template():
    reasoning, content, s = streamed(["Okay, so", " 2+2.</thi", "nk>\n\n", "4"], opened=True)
    assert reasoning == "Okay, so 2+2."
    assert content == "4"
    # a whole text, not told: a closing tag before any opening one means the prompt opened it
    whole = split("Okay, so 2+2.</think>\n\n4")
    assert (whole.reasoning, whole.content) == ("Okay, so 2+2.", "4")
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n")


def test_text_before_and_after_the_thinking():
    whole = split("Sure. <think>hmm</think> Here it is.")
    assert whole.reasoning == "hmm"
    assert whole.content == "Sure.  Here it is."
    lead = split("\n\n<think>hmm</think>\n\nAnswer")
    assert (lead.reasoning, lead.content) == ("hmm", "Answer")


def test_without_reasoning_is_what_the_next_turn_sees():
    assert without_reasoning(ANSWER) == "It is 4."
    assert without_reasoning("plain") == "plain"
    assert without_reasoning("<think>never closed") == ""
