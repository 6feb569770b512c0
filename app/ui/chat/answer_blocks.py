"""The blocks an answer holds besides its text: its thinking (a reasoning model's, collapsed once it ends) and its
tool calls, each with the words its header shows; and the small links of a message's header."""

from __future__ import annotations

import html


def thinking_label(seconds: float | None, expanded: bool, still: bool = False) -> str:
    took = f" for {seconds:.1f} s" if seconds is not None else ""
    return f"{'▾' if expanded else '▸'} {'Thinking…' if still else 'Thought' + took}"


class Thought:
    """One answer's thinking block: its frame in the document, and whether it is open."""

    def __init__(self, frame, text: str, seconds: float | None, expanded: bool = False):
        self.frame, self.text, self.seconds, self.expanded = frame, text, seconds, expanded


class CallBlock:
    """One tool call's block: its frame, the call (CallRecord.to_json(), with "state": waiting | running |
    done), and whether it is open."""

    def __init__(self, frame, call: dict, expanded: bool):
        self.frame, self.call, self.expanded = frame, call, expanded


CALL_STATES = {"once": "allowed once", "always": "always allowed", "allowed": "allowed (always)",
               "deny": "denied", "stopped": "stopped"}


def call_state(call: dict) -> str:
    """How a call went, in a few words: "waiting for you", "running…", "allowed once · 0.2 s", "denied"."""
    state = call.get("state", "done")
    if state == "waiting":
        return "waiting for you to allow it"
    if state in ("called", "running"):
        return "running…"
    if call.get("stopped"):
        return "stopped"
    words = CALL_STATES.get(call.get("decision"), call.get("decision") or "")
    if call.get("decision") in ("deny", "stopped"):
        return words
    took = f" · {call['seconds']:.1f} s" if isinstance(call.get("seconds"), (int, float)) else ""
    return f"{words}{took}" + (" · error" if call.get("is_error") else "") + (" · cut" if call.get("cut") else "")


def header_links(links: list[tuple[str, str | None]]) -> str:
    """[(label, href or None for plain text)] as the header's small links."""
    return "&nbsp;&nbsp;".join(f"<a href='{href}' style='text-decoration:none'>{html.escape(label)}</a>" if href
                               else f"<span style='color:#9ca3af'>{html.escape(label)}</span>" for label, href in links)
