"""The context policy a load asks for, made for one sequence: stop at the context's end, the StreamingLLM
window, or h2o, each adjusted to what the model's cache can do (a cache that cannot shift, a runtime loaded
without attention scores). The one place that chooses, so that h2o can build on the window without the
window knowing of it."""

from __future__ import annotations

from app.engine.context.h2o import HeavyHitterContext
from app.engine.context.window import (DEFAULT_FRACTION, NO_SCORES_NOTICE, NO_SHIFT_NOTICE, ContextPolicy,
                                       SlidingContext, kv_can_shift)
from app.protocol.messages import LoadOptions


def make_policy(name: str, rt, sink_tokens: int = 4, keep_system: bool = True,
                fraction: float = DEFAULT_FRACTION, h2o_heavy: float = LoadOptions.h2o_heavy,
                h2o_recent: float = LoadOptions.h2o_recent) -> ContextPolicy:
    """The policy a user asked for, adjusted to what the model's cache can do."""
    if name == "stop":
        return ContextPolicy(sink_tokens, keep_system, fraction)
    can_shift = kv_can_shift(rt)
    if name == "h2o" and can_shift and getattr(rt, "attention", None) is not None:
        policy = HeavyHitterContext(rt.attention, sink_tokens, keep_system, h2o_heavy, h2o_recent)
        policy.notice = rt.attention.notice
        return policy
    # h2o without its scores (a runtime loaded without them) slides as the window does.
    policy = SlidingContext(name in ("window", "h2o") and can_shift, sink_tokens, keep_system, fraction)
    if name in ("window", "h2o") and not can_shift:
        policy.notice = NO_SHIFT_NOTICE
    elif name == "h2o":
        policy.notice = NO_SCORES_NOTICE
    return policy
