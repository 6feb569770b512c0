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
    # Counts, not only a share, so the monitor and the answer's header ("2 tokens as before") say the same; and a
    # speed only where drafts were taken: with none accepted, "1.45x plain speed" (the cost model's estimate against
    # a calibration made under other load) contradicted "accepted 0%" (#55 D3).
    accepted, drafted = int(spec.get("accepted") or 0), int(spec.get("drafted") or 0)
    said = f"accepted {accepted:,} of {drafted:,} drafted tokens ({100 * accepted / drafted:.0f}%)"
    speedup = spec.get("speedup") or 1.0
    return f"{said}, about {speedup:.2f}x plain speed" if accepted and speedup != 1.0 else said
