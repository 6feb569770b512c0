"""What a load changed on its own, as status-bar notices (app.ui.widgets.notices), worded for a user.

A first start runs with llama.cpp's extra buffer types off while a probe checks them: a normal one-time state,
so it is news (INFO), in plain words, and it goes by itself; it once showed "Extra buffer types off" in orange
beside "Ready", the first thing a new user saw (#49.14). A context policy that could not do what was asked is a
WARNING that stays while that model is loaded. Every notice here has a cause under "load.", which the window
clears when another load starts or the model goes.
"""

from __future__ import annotations

from app.ui.widgets.notices import INFO, UNTIL_CLEARED, WARNING, Notice

CAUSE = "load"  # the prefix: clearing it clears every notice below
FIRST_START_LIFETIME_S = 20.0


def extra_bufts_notice(info: dict) -> Notice | None:
    """The extra-buffer-types probe's state when it turned them off for this load (else None)."""
    probe = info.get("extra_bufts_probe") or {}
    if info.get("extra_bufts") is False and probe.get("background"):  # a first start: no answer yet, no crash
        return Notice("First start: checking which of llama.cpp's speed-ups are safe on this computer",
                      INFO, f"{CAUSE}.bufts", FIRST_START_LIFETIME_S,
                      "This first load runs without llama.cpp's extra buffer types (AMX / weight repacking) while a "
                      "test run checks that they are safe on this machine; the next load uses its answer.")
    if info.get("extra_bufts") is False and probe and not probe.get("ok", True):
        detail = probe.get("detail") or "the probe crashed"
        return Notice("Running in a safe mode for this computer's processor, a little slower", INFO,
                      f"{CAUSE}.bufts", "default",
                      "llama.cpp's extra buffer types (AMX / weight repacking) are off on this machine because they "
                      f"crashed in a test run ({detail}); models run safely without them, a little slower.")
    return None


def policy_notice(info: dict) -> Notice | None:
    """A context policy that changed a setting or fell back (h2o turns flash attention off; a cache that cannot
    shift makes the window evaluate again), for as long as the model is loaded."""
    window = info.get("window") or {}
    if not window.get("notice"):
        return None
    return Notice(window["notice"], WARNING, f"{CAUSE}.policy", UNTIL_CLEARED,
                  f"Context policy: {window.get('policy') or 'default'}.")


def load_notices(info: dict) -> list[Notice]:
    """What the load changed on its own, in the order they are posted (the last is shown first)."""
    return [n for n in (extra_bufts_notice(info), policy_notice(info)) if n is not None]
