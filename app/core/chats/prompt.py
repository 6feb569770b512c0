"""A chat's prompt, built in one place for every client: the window (app/ui/chat), `hearth chat`
(app/commands/chat.py, chat_docs.py) and anything else that sends a stored or typed conversation to a model.

Qt-free and engine-free: it turns the conversation as a client keeps it into the messages the model gets. The
chat template (the engine's) and the tool descriptions (app/tools/tool_chat.py, shared the same way) come after.

- The system text first, when there is one.
- Each question as typed, with the documents attached to it whole (meta "attachments", mode "whole", as
  app/docs/conversation.py keeps them) before it, each in a <document name="..."> block.
- Each answer without its thinking (reasoning models are given their earlier answers so), except the answer
  being continued, which goes whole: it is this turn's, and the model goes on with it.
- An answer's tool calls and their results as the model made them (app/core/chats.tool_turn_messages); a turn
  that already is a tool call or result (the terminal's history) goes as it is.
- The last question, when passages were retrieved for it (app/docs), as retrieval wrote it: the sources, the
  instruction to cite them and the question, after its whole documents.
- A question's images and sounds (meta "media": [{digest, kind, name}], kept once in the chat store) as parts
  before its text, each made by the client's `media_of(reference)` (the seam's part, app/protocol/media.py).
"""

from __future__ import annotations

from typing import Callable

from app.core.chats.store import MEDIA, tool_turn_messages
from app.core.chats.reasoning import without_reasoning

ATTACHMENTS = "attachments"  # a user message's meta key for its files (app/docs/conversation.KEY)


def documents_block(attachments: list[dict]) -> str:
    """The whole documents a message carries, each with its name."""
    return "\n\n".join(f'<document name="{a.get("name")}">\n{a.get("text")}\n</document>' for a in attachments)


def whole_documents(meta: dict | None) -> list[dict]:
    return [a for a in (meta or {}).get(ATTACHMENTS) or [] if a.get("mode") == "whole" and a.get("text")]


def chat_messages(system: str | None, turns: list[dict], continuing: int | None = None,
                  passages: str | None = None, media_of: Callable[[dict], dict | None] | None = None) -> list[dict]:
    """The messages for a conversation. turns: [{role, content, meta?, id?, ...}], oldest first, the last one the
    question (or the answer being continued). continuing: the id of that answer. passages: the last question as
    retrieval wrote it (its sources, the instruction and the question), in place of its text. media_of: a kept
    medium's part by its reference ({digest, kind, name}), or None where its bytes are gone; without it a
    question's media are left out."""
    out: list[dict] = [{"role": "system", "content": system.strip()}] if system and system.strip() else []
    questions = [i for i, t in enumerate(turns) if t["role"] == "user"]
    last_question = questions[-1] if questions else None
    for i, turn in enumerate(turns):
        meta = turn.get("meta") or {}
        plain = {k: v for k, v in turn.items() if k not in ("meta", "id")}
        if turn["role"] == "assistant" and not turn.get("tool_calls"):
            own = continuing is not None and turn.get("id") == continuing
            out += tool_turn_messages(turn["content"] if own else without_reasoning(turn["content"]), meta)
        elif turn["role"] == "user":
            content = passages if i == last_question and passages is not None else turn["content"]
            whole = whole_documents(meta)
            text = f"{documents_block(whole)}\n\n{content}" if whole else content
            parts = media_parts(meta, media_of)
            # The media first, then the text, as `hearth chat` sends them (most such models were trained so).
            out.append({**plain, "content": [*parts, {"type": "text", "text": text}] if parts else text})
        else:
            out.append(plain)
    return out


def media_parts(meta: dict, media_of: Callable[[dict], dict | None] | None) -> list[dict]:
    """A question's images and sounds as parts, in the order attached; one whose bytes are gone (a history from a
    damaged file) is left out rather than sent empty."""
    if media_of is None:
        return []
    parts = [media_of(ref) for ref in meta.get(MEDIA) or [] if isinstance(ref, dict)]
    return [part for part in parts if part]
