"""Whole document or passages, decided by the budget (half the context minus the conversation, or set), and the
prompt the model gets: whole documents with their names, passages as numbered sources, the answer's citations."""

from __future__ import annotations

import pytest

from app.docs.attach import budget, plan, read_attachment
from app.docs.context import DocContext, Source, cited
from app.backends.vocab import TokenCounter


@pytest.fixture(scope="module")
def count(bundled_model):
    counter = TokenCounter(bundled_model)  # the chat model's own vocabulary: exact counts
    assert counter.exact
    yield counter.count
    counter.close()


def long_document(path, facts_at: int = 37):
    lines = [f"Section {i}. The committee discussed item {i} about routine matters and approved it." for i in range(80)]
    lines[facts_at] = "Section 37. The lighthouse on Skarvøy island was automated in 1987."
    path.write_text("\n\n".join(lines), encoding="utf-8")
    return path


def test_the_budget_is_half_the_context_minus_the_conversation_or_set():
    assert budget(4096, 100).tokens == 1948
    assert budget(4096, 3000).tokens == 0
    assert budget(4096, 100, override=500).tokens == 500
    assert "half the 4,096-token context minus the conversation's 100" in budget(4096, 100).describe()


def test_a_document_within_the_budget_goes_in_whole_with_its_name(tmp_path, count):
    note = tmp_path / "party.txt"
    note.write_text("The garden party's budget is 450 euros.", encoding="utf-8")
    attachment = read_attachment(note, count)
    assert attachment.tokens == count(note.read_text())
    context = DocContext(count)
    context.add(plan([attachment], budget(4096, 20)))
    turn = context.turn("What is the party's budget?", budget(4096, 20))
    assert attachment.mode == "whole" and turn.sources == []
    assert turn.content.startswith('<document name="party.txt">\nThe garden party')
    assert turn.content.endswith("What is the party's budget?")
    context.close()


def test_a_longer_one_is_retrieved_per_question_with_numbered_sources(tmp_path, count):
    small = tmp_path / "small.md"
    small.write_text("# Note\nBring a torch.", encoding="utf-8")
    big = long_document(tmp_path / "minutes.txt")
    attachments = [read_attachment(big, count), read_attachment(small, count)]
    limit = budget(2048, 30)  # 994 tokens: the minutes (about 1,500) do not fit, the note does
    plan(attachments, limit)
    assert [a.mode for a in attachments] == ["retrieval", "whole"]
    context = DocContext(count)
    context.add(attachments)
    turn = context.turn("When was the Skarvøy lighthouse automated?", limit)
    first = turn.sources[0]
    assert first.n == 1 and "automated in 1987" in first.hit.text and first.hit.path.endswith("minutes.txt")
    text = big.read_text(encoding="utf-8")
    assert text[first.hit.start:first.hit.end] == first.hit.text  # the citation's span is the passage
    assert '<document name="small.md">' in turn.content and "Section 37. The lighthouse" in turn.content
    assert "[1] minutes.txt\n" in turn.content and "Cite each source" in turn.content
    assert count(turn.content) < attachments[0].tokens  # passages of the minutes, not the minutes
    assert count(turn.content) < limit.tokens + 100
    # A setting of 0 tokens sends every attachment by passages.
    assert [a.mode for a in plan(attachments, budget(2048, 30, override=0))] == ["retrieval", "retrieval"]
    context.close()


def test_the_answers_citations_map_to_its_sources(tmp_path, count):
    big = long_document(tmp_path / "minutes.txt")
    context = DocContext(count, passages=3)
    context.add(plan([read_attachment(big, count)], budget(512, 0)))
    hit = context.turn("lighthouse automated", budget(512, 0)).sources[0].hit
    sources = [Source(n, hit) for n in (1, 2, 3)]
    assert [s.n for s in cited("It was automated in 1987 [1], see also [3] and [9].", sources)] == [1, 3]
    assert cited("No citation here.", sources) == []
    context.close()


def test_the_terminal_prints_the_cited_sources_by_file_and_page(tmp_path, count, capsys):
    from app.commands.chat_docs import ChatDocs
    from app.docs.search import Hit

    hit = Hit(7, str(tmp_path / "manual.pdf"), 3, None, 120, 480, "The reset button...", "home", 0.03)
    ChatDocs.print_sources("Press it [1].", [Source(1, hit), Source(2, hit)])
    assert capsys.readouterr().out == f"Sources:\n  [1] manual.pdf p. 3  ({tmp_path / 'manual.pdf'}, characters 120-480)\n"
    ChatDocs.print_sources("No idea.", [Source(1, hit)])
    assert capsys.readouterr().out.startswith("Sources given to the model (the answer cites none):\n  [1] manual.pdf p. 3")
