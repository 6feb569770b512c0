"""Reasoning models' thinking (DeepSeek-R1 distills, Qwen3, QwQ): `<think>…</think>` split from the answer.

One parser for every client: the API returns the thinking as `reasoning_content` (as llama-server does),
the window shows it as a collapsible block and leaves it out of the next turn's prompt.

ReasoningSplitter reads an answer as it streams, a token at a time: a tag may arrive split across tokens,
so text that could be the start of a tag is held back until the next piece decides it. An answer may start
inside the thinking, without its `<think>`, where the chat template already opened it in the prompt
(DeepSeek-R1's and QwQ's templates do): `opened=True` says so. split() reads a whole text and, when it is not
told, takes an answer that closes a thinking it never opened as one that started inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

OPEN, CLOSE = "<think>", "</think>"


@dataclass
class Split:
    reasoning: str
    content: str
    thinking: bool = False  # the answer (so far) ends inside its thinking: the thinking is not finished


def _held(text: str, tag: str) -> int:
    """How many characters at text's end could be the start of tag (to hold back until more comes)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ReasoningSplitter:
    """Feed the answer's pieces in order; each feed returns the (reasoning, content) text it makes known."""

    def __init__(self, opened: bool = False):
        self.thinking = opened
        self.seen_thinking = opened  # whether the answer had any thinking
        self._pending = ""
        self.reasoning = ""  # all of it so far
        self.content = ""

    def feed(self, piece: str) -> tuple[str, str]:
        if not self.seen_thinking and not self._pending and "<" not in piece:
            # Most pieces of most answers: no tag can start here, and nothing is held or stripped. This is
            # per token on the API's every stream, so it skips the general path's scanning.
            self.content += piece
            return "", piece
        text = self._pending + piece
        self._pending = ""
        reasoning, content = [], []
        while text:
            tag = CLOSE if self.thinking else OPEN
            at = text.find(tag)
            if at < 0:
                hold = _held(text, tag)
                out, self._pending = text[:len(text) - hold], text[len(text) - hold:]
                (reasoning if self.thinking else content).append(out)
                break
            (reasoning if self.thinking else content).append(text[:at])
            text = text[at + len(tag):]
            if not self.thinking and not (self.content + "".join(content)).strip():
                content.clear()  # whitespace before the thinking is not part of the answer
            self.thinking = not self.thinking
            self.seen_thinking = True
        got_reasoning, got_content = "".join(reasoning), "".join(content)
        if self.seen_thinking and not self.content.strip():
            got_content = got_content.lstrip()  # the answer starts after the thinking's closing line breaks
        if not self.reasoning:
            got_reasoning = got_reasoning.lstrip()
        self.reasoning += got_reasoning
        self.content += got_content
        return got_reasoning, got_content

    def finish(self) -> tuple[str, str]:
        """The end of the answer: what was held back as a possible tag is text after all."""
        rest, self._pending = self._pending, ""
        if self.thinking:
            rest = rest if self.reasoning else rest.lstrip()
            self.reasoning += rest
            return rest, ""
        if self.seen_thinking and not self.content.strip():
            rest = rest.lstrip()
        self.content += rest
        return "", rest

    def split(self) -> Split:
        return Split(self.reasoning.strip(), self.content, self.thinking)


def split(text: str, opened: bool | None = None) -> Split:
    """A whole (or partial) answer's thinking and content. opened=None: an answer that closes a thinking
    before any `<think>` started inside one (the template opened it in the prompt)."""
    if opened is None:
        close, open_ = text.find(CLOSE), text.find(OPEN)
        opened = close >= 0 and (open_ < 0 or close < open_)
    splitter = ReasoningSplitter(opened)
    splitter.feed(text)
    thinking = splitter.thinking
    splitter.finish()
    result = splitter.split()
    result.thinking = thinking
    return result


def without_reasoning(text: str) -> str:
    """An earlier answer as the next turn's prompt takes it: reasoning models want their thinking left out."""
    if OPEN not in text and CLOSE not in text:
        return text
    return split(text).content


def prompt_opens_thinking(prompt: str) -> bool:
    """Whether a rendered prompt ends inside an opened thinking (the answer starts in it)."""
    tail = prompt.rstrip()
    return tail.endswith(OPEN)
