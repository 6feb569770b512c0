"""What a message's header says and offers: its note (who wrote it, how it went) and its links (Copy, Edit,
Regenerate, Continue, its sources, its versions). The chat page shows them; the transcript draws them."""

from __future__ import annotations

from app.core.chats.answer_saving import INTERRUPTED
from app.docs.conversation import KEY as ATTACHMENTS
from app.docs.conversation import chip_text, figure


def answer_note(meta: dict) -> str:
    """The header's note: which model wrote it, and where, first; the rest is how it went."""
    signed = [meta["model"] + (f" on {meta['endpoint']}" if meta.get("endpoint") else "")] \
        if meta.get("model") else []
    signed = [chip_text(a) for a in meta.get(ATTACHMENTS) or []] + signed  # a question's files, as chips
    if meta.get("partial"):
        return " · ".join([*signed, "partial answer: cut off by an error"])
    # A server that sends no token counts (llama-cpp-python's) still streamed its chunks: count those.
    count = figure(meta["completion_tokens"], "tokens") if meta.get("completion_tokens") else (
        figure(meta["stream_chunks"], "chunks") if meta.get("stream_chunks") else "")
    # A speed only where one was measured: an imported answer has its tokens but no speed (it showed "0.0 tok/s").
    speed = meta.get("gen_tok_s")
    measured = [figure(f"{speed:.1f}", "tok/s")] if isinstance(speed, (int, float)) and speed > 0 else []
    parts = [*signed, *([count, *measured] if count else [])]
    if meta.get("finish_reason") == "cancelled":
        parts.append("stopped when Hearth was closed" if meta.get("stopped_by") == "quit" else "stopped")
    elif meta.get("finish_reason") == INTERRUPTED:  # saved while it streamed; the window died before its end
        parts.append("interrupted: Hearth closed before the answer ended")
    elif meta.get("finish_reason") == "length":
        parts.append("hit the length limit")
    if (meta.get("prediction") or {}).get("accepted"):  # regenerated or edited: drafted from the old answer
        parts.append(f"{figure(meta['prediction']['accepted'], 'tokens')} as before")
    if meta.get("prompt_dropped"):  # never silently: part of the conversation was out of the model's view
        dropped = figure(f"{meta['prompt_dropped']:,}", "earlier")
        parts.append(f"the chat is longer than the context: {dropped} tokens were not seen")
    return " · ".join(parts)


def message_links(msg, last: bool = False) -> list[tuple[str, str | None]]:
    """last: the conversation's last message, which alone can be continued (what follows would not fit)."""
    links: list[tuple[str, str | None]] = [("Copy", f"message-copy:{msg.id}")]
    if msg.role == "user":
        links.append(("Edit", f"edit:{msg.id}"))
    elif msg.role == "assistant":
        links.append(("Regenerate", f"regenerate:{msg.id}"))
        if last and msg.content and msg.meta.get("finish_reason") in ("length", "cancelled", INTERRUPTED):
            links.append(("Continue", f"continue:{msg.id}"))
        # The passages the answer was given, each opening its text: [1] manual.pdf p. 2
        links += [(f"[{src['n']}] {src['where']}", f"source:{msg.id}.{src['n']}")
                  for src in msg.meta.get("sources") or []]
    if msg.versions > 1:
        # Set apart from the actions (#55 F: "‹" sat 5 px from Continue, and a click meant for it generated).
        links += [("   ·   ", None), ("‹", f"prev:{msg.id}" if msg.version > 1 else None), (f"{msg.version}/{msg.versions}", None),
                  ("›", f"next:{msg.id}" if msg.version < msg.versions else None)]
    return links
