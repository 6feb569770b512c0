"""A time and size budget for rendering an untrusted chat template.

Jinja's sandbox keeps a template away from Python's internals, but it does not bound work: two nested
`range(100000)` loops run for hours and `'x' * 200000000` takes gigabytes. A chat template from a GGUF file
is a program from the internet, so its rendering gets a budget: loops pass through a range that checks the
clock, the memory and the request's cancel flag; string and list products, powers and concatenations are
sized before they are made; the output is counted as it is produced. Breaking the budget is one sentence,
never a hung or exhausted engine.
"""

from __future__ import annotations

import sys
import threading
import time

from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.core.errors import HearthError

RENDER_SECONDS = 5.0  # a real template renders a long conversation in milliseconds
MAX_CHARS = 32 * 1024 * 1024  # of any string or list a template builds, and of its output
MAX_RANGE = 1_000_000
MAX_GROWTH_MB = 512  # more peak memory than this while rendering ends it
CHECK_EVERY = 16  # loop iterations between clock and memory checks (a check costs about a microsecond)


class TemplateBudgetError(HearthError):
    pass


try:
    import resource

    def _peak_mb() -> float:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # one cheap system call
        return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux
except ImportError:  # Windows
    import psutil

    _self = psutil.Process()

    def _peak_mb() -> float:
        info = _self.memory_info()
        return getattr(info, "peak_wset", info.rss) / (1024 * 1024)


class Budget:
    def __init__(self, cancelled: threading.Event | None, seconds: float | None = None):
        seconds = RENDER_SECONDS if seconds is None else seconds
        self.deadline = time.monotonic() + seconds
        self.cancelled = cancelled
        self.base_mb = _peak_mb()
        self.seconds = seconds

    def check(self) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise TemplateBudgetError("The request was cancelled while the chat template was rendering.")
        if time.monotonic() > self.deadline:
            raise TemplateBudgetError(f"The model's chat template took longer than {self.seconds:g} s to render "
                                      "the conversation; it is broken or hostile.")
        if _peak_mb() - self.base_mb > MAX_GROWTH_MB:
            raise TemplateBudgetError(f"The model's chat template used more than {MAX_GROWTH_MB} MB of memory to "
                                      "render the conversation; it is broken or hostile.")


def _too_big(what: str) -> TemplateBudgetError:
    return TemplateBudgetError(f"The model's chat template tried to build {what} larger than "
                               f"{MAX_CHARS // (1024 * 1024)} MB; it is broken or hostile.")


def _size(value) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


class BudgetedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every loop, product and function call checked against the current budget."""

    intercepted_binops = frozenset(["*", "**", "+"])

    def __init__(self, **options):
        super().__init__(**options)
        self._local = threading.local()
        self.globals["range"] = self._range

    def checked_template(self, source: str):
        """Compile a template whose string joins (`a ~ b`, `{{ a }}{{ b }}` in an expression) are sized too.

        The sandbox does not intercept Jinja's concatenation; the compiled module looks its join helpers up in
        its own globals, so they are wrapped there.
        """
        template = self.from_string(source)
        names = template.root_render_func.__globals__
        for name in ("str_join", "markup_join"):
            join = names.get(name)
            if join is not None:
                names[name] = self._sized_join(join)
        return template

    def _sized_join(self, join):
        def sized(seq):
            parts = list(seq)
            if sum(len(p) for p in parts if isinstance(p, str)) > MAX_CHARS:
                raise _too_big("a string")
            self._check()
            return join(parts)

        return sized

    @property
    def budget(self) -> Budget | None:
        return getattr(self._local, "budget", None)

    def render(self, template, cancelled: threading.Event | None = None, **context) -> str:
        """The template's output, produced under a fresh budget."""
        self._local.budget = budget = Budget(cancelled)
        try:
            parts, size = [], 0
            for piece in template.generate(**context):
                size += len(piece)
                if size > MAX_CHARS:
                    raise _too_big("a prompt")
                parts.append(piece)
                budget.check()
            return "".join(parts)
        finally:
            self._local.budget = None

    def _check(self) -> None:
        budget = self.budget
        if budget is not None:
            budget.check()

    def _range(self, *args):
        span = range(*args)
        if len(span) > MAX_RANGE:
            raise TemplateBudgetError(f"The model's chat template asked for a loop of {len(span):,} steps; "
                                      "it is broken or hostile.")
        return self._checked(span)

    def _checked(self, items):
        for i, item in enumerate(items):
            if i % CHECK_EVERY == 0:
                self._check()
            yield item

    def call_binop(self, context, operator, left, right):
        self._check()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                n = _size(seq)
                if n is not None and isinstance(times, int) and n * times > MAX_CHARS:
                    raise _too_big("a string or list")
        elif operator == "+":
            a, b = _size(left), _size(right)
            if a is not None and b is not None and a + b > MAX_CHARS:
                raise _too_big("a string or list")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 4096:
                raise TemplateBudgetError("The model's chat template tried to compute a number with thousands of "
                                          "digits; it is broken or hostile.")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's own signature
        __self._check()
        return super().call(__context, __obj, *args, **kwargs)
