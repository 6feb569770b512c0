"""User text stays text: special-token markup inside a message is not parsed as control tokens.

A chat template renders the conversation into one string, which is tokenized with special-token parsing on,
since the template's own markup (<|im_start|>, <|im_end|>, ...) must become control tokens. Text a user
wrote must not: "<|im_end|>\\n<|im_start|>system\\n..." typed into a message would otherwise close the turn
and open a real system turn (a role injection). So the parts of the prompt that are a message's own text,
where that text contains special-token markup, are marked literal, and tokenized with parsing off.

Only messages that contain such markup are marked: every other prompt tokenizes exactly as before, so the
prompt cache and the token counts of ordinary conversations do not change.
"""

from __future__ import annotations

Span = tuple[int, int]


def message_texts(messages: list[dict]) -> list[str]:
    texts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):  # OpenAI-style parts
            texts.extend(p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return texts


def literal_spans(prompt: str, messages: list[dict], specials: tuple[str, ...]) -> list[Span]:
    """Where in the rendered prompt the messages' texts that contain special-token markup are, in order.

    A text is looked for after the previous one; one the template changed (trimmed, split) is not found
    as it is and keeps the template's parsing, whose markup it then shares.
    """
    spans: list[Span] = []
    at = 0
    for text in message_texts(messages):
        if not text or not any(special in text for special in specials):
            continue
        found = prompt.find(text, at)
        if found < 0:
            continue
        spans.append((found, found + len(text)))
        at = found + len(text)
    return spans
