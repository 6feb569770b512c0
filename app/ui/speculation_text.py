"""What the engine decided about speculative decoding, in one sentence for the monitor and the load pane.

"Draft acceptance 0%" read as a failing draft when the engine had decided at load that drafting cannot
pay on this machine (its reason was only in `--json`); these sentences say the decision and its reason.
"""

from __future__ import annotations


def loaded_text(info: dict | None) -> str:
    """After a load: which drafter, and whether the engine will use it (with the reason when not)."""
    if not info or info.get("remote"):
        return ""
    drafter = info.get("drafter")
    if not drafter:
        return "Speculative decoding is off."
    reason = info.get("spec_plain_reason")
    if reason:
        return f"Speculative decoding ({drafter}) is not used: {reason}. Answers run at plain speed."
    return f"Speculative decoding ({drafter}) is on: the engine drafts where it pays."


def answer_text(spec: dict | None) -> str:
    """After an answer, what follows "speculative decoding": what drafting did for it."""
    if not spec:
        return ""
    if not spec.get("drafted"):
        reason = spec.get("plain_reason")
        # No reason: the drafter ran but found nothing to guess (prompt lookup on a chat with no repeats).
        return f"not used: {reason}" if reason else "drafted no tokens"
    return (f"accepted {100 * spec.get('acceptance', 0):.0f}% of drafts, "
            f"{spec.get('speedup', 1.0):.2f}x plain speed")
