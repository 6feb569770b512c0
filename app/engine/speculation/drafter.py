"""What the Speculator needs from a source of draft tokens.

A drafter only guesses; the target verifies every guess, so a drafter can never change an answer, only its
speed. What it must tell the Speculator is therefore about cost: whether its drafts are free (prompt lookup)
or cost a model step each (a draft model), because that decides whether drafting can pay at all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class Drafter(ABC):
    # Shown to the user beside the acceptance rate (stats and done events, the monitor).
    name: str = "drafter"
    # True when the drafter keeps a KV cache of its own that must follow the target's history. Its drafts
    # then cost work, so they are not checked against plain steps for free, and when the target's context
    # window moves it is handed the whole history again (begin).
    follows_kv: bool = False
    # Seconds one draft token costs, as the Speculator's step costs are measured. The planner
    # weighs k draft tokens against the target steps they save; 0 for drafts that cost next to nothing.
    step_s: float = 0.0
    # Acceptance every answer starts from, as (accepted drafts, rejecting verifies): a fair chance, so that a
    # new drafter gets tried.
    prior: tuple[float, float] = (2.0, 2.0)
    # The acceptance a drafter reaches at best (an answer that copies its input), for the calibration's verdict
    # on whether drafting can pay at all on this machine and model.
    optimistic_alpha: float = 0.9

    @abstractmethod
    def begin(self, history: list[int]) -> None:
        """Start from this token history: a new answer, or a window that dropped tokens from the middle."""

    @abstractmethod
    def advance(self, tokens: list[int]) -> None:
        """The target accepted these tokens after the history; later drafts continue from them."""

    @abstractmethod
    def propose(self, k: int) -> list[int]:
        """Up to k tokens that may come next ([] when there is no guess worth a verify)."""

    def measure(self, renew: bool = False) -> None:
        """Set step_s before the first answer, from a kept calibration (app/engine/speculation/spec_calibration.py);
        nothing to measure for a free drafter."""

    def report(self, generated: list[int]) -> dict:
        """Figures about this drafter's source for the answer's Done event (a prediction's agreement)."""
        return {}

    def close(self) -> None:
        """Release what the drafter holds (a draft model's memory); the Speculator calls it once, at unload."""
