"""Live graphs of what the engine and the machine are doing.

Engine `stats` events arrive about every 0.2 s during generation; they only
append to ring buffers. A timer redraws at most every REDRAW_MS, and only
when something changed and the graphs are visible, so the graphs cost the
engine (which shares the CPU) as little as possible. Each graph is a LivePlot
(app/ui/monitor/live_plot.py), painted with QPainter from a cached frame.

The x axis is "seconds ago" over a fixed span (15 s, stepping out to two
minutes as the history grows), and the y ranges only step to a rounded
ceiling when the data outgrows them, so a plot's frame (title, axes, ticks,
grid) is painted again only when one of those steps happens. The series keep
their points in absolute time; a curve is given new data only when its series
got points since the last redraw (tests/ui/monitor/test_monitor.py counts them).

With pyqtgraph, even so optimised, a redraw cost the window's thread ~6 ms (half of it Python bookkeeping
for items moving with time), four times a second while an answer streams: CPU the engine's threads need
(hearth bench gui's ratio sat at 0.95 with the monitor ~40% of the window's work). A LivePlot redraw is one
pixmap copy and a polyline per series.
"""

from __future__ import annotations

import html
import math
import re
import textwrap
import time
from collections import deque

import numpy as np
from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QWidget

from app.core.metrics import system_memory_mb
from app.protocol import messages as P
from app.ui.monitor.live_plot import LivePlot, nice_step
from app.ui.models.runtime_text import placement_text, short_device
from app.ui.models.speculation_text import answer_text
from app.ui.widgets import LiveText, vbox

REDRAW_MS = 250  # the issue asks for at least four updates a second; each costs the engine's CPU
HISTORY = 900  # points per series: three minutes at five a second
SPANS_S = (15, 30, 60, 120)  # the x axis: the shortest span that holds the oldest point, at most two minutes
SYSTEM_MEMORY_EVERY_S = 1.0
PER_ANSWER = ("prompt_tok_s", "ttft_s")
# Series that only have points while an answer runs: a gap (NaN) ends each answer, so no line is drawn
# straight across the idle time between answers.
PERCENT_PLOTS = ("kv", "draft")  # their axis is 0-100 %, whatever the values
RIGHT_AXIS = ("shifts",)  # counts drawn on their plot's right-hand axis, in whole numbers
DURING_ANSWERS = ("gen_tok_s", "kv_fill", "shifts", "acceptance")
GPU_COLOR = "#0ea5e9"  # the GPU's memory: only when layers are offloaded, named by the device in use
FOREGROUND = "#9ca3af"  # axes, ticks and titles, on light and dark alike
NOTE_CHARS = 30  # a plot note's line at 8 pt fits the dock's narrowest (MONITOR_MIN_WIDTH)


def nice_ceiling(value: float) -> float:
    """A graph's top: the smallest of 1, 2, 2.5, 5 x 10^n at or above value, and at least 1."""
    return nice_step(value) if value > 1 else 1.0


def _with_note(title: str, note: str) -> str:
    """A plot title with a small note on a line of its own (the dock is narrow); the title alone without one."""
    return f"{title}<br><span style='font-size:8pt'>{note}</span>" if note else title


def unbroken(text: str) -> str:
    """A summary figure that never wraps inside "87.0 tok/s" (a break after the slash read "tok/ s"): a number
    stays with its unit. Only there: a whole figure kept on one line ran past the dock's edge ("25% of dr")."""
    return re.sub(r"(\d) ", "\\1\u00a0", text).replace("/", "/\u2060")


def legend(entries: list[tuple[str, str, bool]]) -> str:
    """A plot's legend as part of its title [(label, colour, dots)]: a legend inside the plot covered data."""
    return "&nbsp;&nbsp;".join(f"<span style='color:{color}'>{'●' if dots else '━'}&nbsp;{label}</span>"
                               for label, color, dots in entries)


class Series:
    def __init__(self):
        self.t: deque = deque(maxlen=HISTORY)
        self.v: deque = deque(maxlen=HISTORY)
        self.version = 0  # counts changes: a curve is given new data only when its series changed
        self._arrays: tuple | None = None
        self._arrays_version = -1

    def add(self, t: float, v: float) -> None:
        self.t.append(t)
        self.v.append(v)
        self.version += 1

    def arrays(self):
        """(times, values) as arrays, made again only after a change."""
        if self._arrays_version != self.version:
            self._arrays = (np.fromiter(self.t, float, len(self.t)), np.fromiter(self.v, float, len(self.v)))
            self._arrays_version = self.version
        return self._arrays

    def clear(self) -> None:
        self.t.clear()
        self.v.clear()
        self.version += 1


class MonitorView(QWidget):
    redrawn = Signal()

    def __init__(self, bridge=None, parent=None):
        """bridge: the window's EngineBridge, whose news the monitor follows (none: tests feed it figures)."""
        super().__init__(parent)
        self.t0 = time.monotonic()
        self.answering = False  # an answer was asked and has not ended: only then can a crash cut one off
        self._said: str | None = None  # a sentence about the engine's state on show: "crashed", "unloaded" (_on_state)
        self.series = {name: Series() for name in
                       ("gen_tok_s", "prompt_tok_s", "ttft_s", "engine_mb", "system_mb", "gpu_mb", "kv_fill",
                                 "shifts", "acceptance")}
        self.graphs = QWidget()
        graphs_layout = vbox(parent=self.graphs, margin=0)
        graphs_layout.setSpacing(2)
        self.curves = {}
        self.drawn: dict[str, int] = {}  # curve -> the version of its series it shows
        self.rebuilt = 0  # curves given new data, counted for tests
        self.plots = {}
        self.members: dict[str, list[str]] = {}  # plot -> its series
        self.titles: dict[str, str] = {}
        self.notes: dict[str, str] = {}
        self.legends: dict[str, list[tuple[str, str, bool]]] = {}
        self.engine_mb: float | None = None  # carried forward each second while a model is loaded
        self.gpu_label = "GPU used"  # the device in use, once a model on a GPU runtime says which
        layout_spec = [
            ("speed", "Tokens/s", [("gen_tok_s", "#10b981", "generation"), ("prompt_tok_s", "#3b82f6", "prompt")]),
            ("ttft", "Time to first token (s)", [("ttft_s", "#f59e0b", "per answer")]),
            ("memory", "Memory (MB)", [("engine_mb", "#a855f7", "engine"), ("system_mb", "#6b7280", "system used")]),
            # Each quantity on an axis of its own unit (#49.9): window shifts, a count, were a flat line on the KV
            # cache's percent axis, which nobody could read; they have the right-hand axis, in their colour (a
            # sixth graph made the monitor too tall for a 600-pixel screen).
            ("kv", "KV cache (%)", [("kv_fill", "#ef4444", "fill %"), ("shifts", "#f97316", "window shifts")]),
            ("draft", "Draft acceptance (%)", [("acceptance", "#14b8a6", "accepted")]),
        ]
        for key, title, curves in layout_spec:
            plot = LivePlot(title, SPANS_S[0])
            graphs_layout.addWidget(plot, 1)
            self.plots[key] = plot
            self.members[key] = []
            self.titles[key] = title
            self.legends[key] = []
            for curve in curves:
                self._add_curve(key, *curve)
        # Five lines, always: a summary that wrapped to another number of lines resized every graph below it,
        # and that relayout and full repaint cost the window's thread ~50-70 ms at once. Five hold the figures,
        # speculation's included, at the dock's narrowest (four cut the last); the whole summary is also the
        # tooltip. LiveText: the figures change several times a second, a QLabel relayouts the window each time.
        self.summary = LiveText("Idle", lines=5)
        vbox(self.summary, (self.graphs, 1), parent=self, margin=4)

        self._dirty = False
        self._last_system = 0.0
        self.redraws = 0
        self.timer = QTimer(self, interval=REDRAW_MS, timeout=self._on_tick)
        self.timer.start()
        if bridge is not None:
            self._follow(bridge)

    def _follow(self, bridge) -> None:
        bridge.generation_started.connect(self._on_started)
        bridge.turn_started.connect(self._on_started)
        bridge.prompt_progress.connect(self._on_prompt_progress)
        bridge.stats_received.connect(self._on_stats)
        bridge.generation_finished.connect(self._on_done)
        bridge.generation_failed.connect(self._on_interrupted)
        bridge.engine_crashed.connect(self._on_engine_crashed)
        bridge.model_loaded.connect(self._on_loaded)
        bridge.model_unloaded.connect(self._on_unloaded)
        bridge.state_changed.connect(self._on_state)
        if bridge.ready:
            self._on_loaded(bridge.info)

    def show_figures(self, stats: dict) -> None:
        """Figures from elsewhere than the bridge's answer (the Connections page's remote server)."""
        self._on_stats(stats)

    def _add_curve(self, key: str, name: str, color: str, label: str) -> None:
        plot = self.plots[key]
        # Per answer: one point each, dots with no line between answers. Lines are one pixel wide: Qt strokes
        # wider ones as filled paths.
        self.curves[name] = plot.add_curve(name, color, dots=name in PER_ANSWER, right=name in RIGHT_AXIS)
        self.members[key].append(name)
        self.legends[key].append((label, color, name in PER_ANSWER))
        self._set_title(key)

    def _set_title(self, key: str, note: str | None = None) -> None:
        if note is not None:
            self.notes[key] = note
        entries = self.legends[key]
        line = legend(entries) if len(entries) > 1 else ""
        # Broken into lines here, at the same words whatever the dock's width (a plot's title wraps too, but
        # a note's lines of even length read better in a narrow dock).
        note = "<br>".join(html.escape(part) for part in textwrap.wrap(self.notes.get(key, ""), NOTE_CHARS))
        self.plots[key].set_title(_with_note(self.titles[key], "<br>".join(x for x in (line, note) if x)))

    def now(self) -> float:
        return time.monotonic() - self.t0

    # --- inputs (slots for the bridge's signals) ---------------------------
    def _on_stats(self, stats: dict) -> None:
        t = self.now()
        s = self.series
        if stats.get("gen_tok_s"):
            s["gen_tok_s"].add(t, stats["gen_tok_s"])
        if stats.get("rss_mb"):
            s["engine_mb"].add(t, stats["rss_mb"])
            self.engine_mb = stats["rss_mb"]
        if stats.get("gpu_mb") is not None:
            if "gpu_mb" not in self.curves:  # its curve and legend entry appear with the first GPU figure
                self._add_curve("memory", "gpu_mb", GPU_COLOR, self.gpu_label)
            s["gpu_mb"].add(t, stats["gpu_mb"])
        if stats.get("n_ctx") and stats.get("n_past") is not None:  # a remote cannot know n_past
            s["kv_fill"].add(t, 100.0 * stats.get("n_past", 0) / stats["n_ctx"])
        window = stats.get("window") or {}
        if "shifts" in window:
            s["shifts"].add(t, window["shifts"])
        spec = stats.get("spec") or {}
        if spec.get("acceptance") is not None and spec.get("drafted"):  # nothing drafted: no rate to draw
            s["acceptance"].add(t, 100.0 * spec["acceptance"])
        if stats.get("ev") == P.STATS and stats.get("gen_tok_s"):  # an answer's live figures, not its end
            speed = unbroken(f"{stats['gen_tok_s']:.1f} tok/s")
            self.summary.setText(f"Generating… {speed}")
        elif stats.get("ev") == P.STATS and self.summary.text().startswith("Reading the prompt"):
            self.summary.setText("Generating…")  # the prompt is read; a speed follows with the second token
        self._dirty = True

    def _on_started(self, waiting: bool = False) -> None:
        """An answer was asked for: the summary says so instead of showing the last answer's figures; waiting:
        other requests (the API's) are answered first."""
        self.answering = True
        self.summary.setText("Waiting its turn: API requests are answered first…" if waiting else "Generating…")

    def _on_prompt_progress(self, done: int, total: int) -> None:
        if total:
            self.summary.setText(f"Reading the prompt… {unbroken(f'{done:,}/{total:,} tokens')}")

    def _on_interrupted(self, _message: str = "") -> None:
        """The answer failed or the engine crashed: no Done comes, and the live speed must not stay up."""
        if not self.answering:  # an error between answers (a load's, the engine's) cut no answer off
            return
        self.answering = False
        self.summary.setText("The last answer did not finish")
        self.summary.setToolTip("")

    def _on_engine_crashed(self, message: str = "") -> None:
        if self.answering:
            self._on_interrupted(message)
        else:  # #49.7: an idle engine's crash: the last answer had finished long before, and is not blamed
            self.summary.setText("The engine stopped between answers and is restarting; no answer was cut off.")
            self.summary.setToolTip(message)
            self._said = "crashed"

    def _on_unloaded(self) -> None:
        self.engine_mb = None
        self.series["engine_mb"].add(self.now(), math.nan)
        self.summary.setText("No model loaded")
        self._said = "unloaded"
        self._dirty = True

    def _on_state(self, state) -> None:
        """A sentence about the engine's state holds only while that state does (#55 D1, D2: "No model loaded"
        stayed after the next load, and "is restarting" after the engine was back): the engine's own state
        (EngineState, app/backends/backend.py) replaces it once it is ready again."""
        from app.backends.backend import EngineState

        if state is not EngineState.READY or self._said is None:
            return
        said, self._said = self._said, None
        self.summary.setText("The engine stopped between answers and restarted; no answer was cut off."
                             if said == "crashed" else "Idle")

    def _on_done(self, done: dict) -> None:
        self.answering = False
        t = self.now()
        if done.get("prompt_tok_s"):
            self.series["prompt_tok_s"].add(t, done["prompt_tok_s"])
        if done.get("ttft_s") is not None:
            self.series["ttft_s"].add(t, done["ttft_s"])
        self._on_stats({k: v for k, v in done.items() if k not in ("gen_tok_s", "ev")})
        for name in DURING_ANSWERS:
            if self.series[name].t:
                self.series[name].add(t, math.nan)
        # A remote server may not send counts or prompt speed: those figures are left out, not shown as 0.
        tokens = done.get("completion_tokens")
        count = f"{tokens} tokens" if tokens is not None else f"{done.get('stream_chunks') or 0} chunks"
        parts = [f"{count} at {done.get('gen_tok_s') or 0:.1f} tok/s"]
        if done.get("prompt_tok_s") is not None:
            parts.append(f"prompt {done['prompt_tok_s']:.0f} tok/s")
        parts.append(f"first token {done.get('ttft_s') or 0:.2f} s")
        if done.get("peak_rss_mb"):
            parts.append(f"peak engine memory {done['peak_rss_mb']:.0f} MB")
        if done.get("spec"):
            parts.append("speculative decoding " + answer_text(done["spec"]))
        extra = []
        if ":" in (done.get("threads_reason") or ""):  # the engine moved its thread count, and says why
            extra.append(done["threads_reason"])
        # The thread note is the least needed figure: in the tooltip, so the lines shown keep the speeds.
        self.summary.setText("Last answer: " + ", ".join(unbroken(p) for p in parts))
        self.summary.setToolTip("Last answer: " + ", ".join(parts + extra))

    def _on_loaded(self, info: dict) -> None:
        self._show_gpu_device(info)
        self._on_stats({k: info[k] for k in ("rss_mb", "gpu_mb") if k in info})
        # A remote model's memory is the server's; its KV fill comes from the server when it tells (llama-server).
        remote = bool(info.get("remote"))
        where = placement_text(info) if info.get("gpu_layers") else ""
        self._set_title("memory", "the model's memory is on the server" if remote else where)
        self._set_title("kv", "from the server, where it reports it" if remote else "")
        if remote:
            self.engine_mb = None
        # An empty graph should say why it is empty.
        drafter = info.get("drafter")
        reason = info.get("spec_plain_reason")
        # The drafter is named in the note, not the title: a title does not wrap (see _set_title).
        # Off at load; Regenerate and Edit draft from the answer they replace by a setting of their own (#49.4).
        self._set_title("draft", "" if remote else "speculative decoding off at load; Regenerate and Edit have a "
                        "setting of their own" if not drafter else
                        f"{drafter}, not used: {reason}" if reason else f"drafter: {drafter}")

    def _show_gpu_device(self, info: dict) -> None:
        """The GPU memory line is named by the device the model's layers are on ("llvmpipe used")."""
        devices = ((info.get("runtime") or {}).get("devices") or []) if info.get("gpu_layers") else []
        if not devices:
            return
        one = short_device(devices[0].get("description") or devices[0].get("name") or "GPU")
        self.gpu_label = f"{one} used" if len(devices) == 1 else f"{len(devices)} GPUs used"
        if "gpu_mb" in self.curves:
            entries = self.legends["memory"]
            entries[:] = [(self.gpu_label, c, d) if c == GPU_COLOR else (lab, c, d) for lab, c, d in entries]
            self._set_title("memory")

    # --- drawing -----------------------------------------------------------
    def _on_tick(self) -> None:
        t = self.now()
        if t - self._last_system >= SYSTEM_MEMORY_EVERY_S:
            self._last_system = t
            self.series["system_mb"].add(t, system_memory_mb()["used_mb"])
            if self.engine_mb is not None:  # the engine's line runs from the load on, not from the first answer
                self.series["engine_mb"].add(t, self.engine_mb)
            self._dirty = True
        if self._dirty and self.isVisible():
            self.redraw()

    def redraw(self) -> None:
        self._dirty = False
        now = self.now()
        data = {name: self.series[name].arrays() for name in self.curves}
        # What the longest span shows: its oldest point sets the span, its largest value each y range.
        shown = {name: (x >= now - SPANS_S[-1]) for name, (x, _y) in data.items()}
        oldest = min((x[shown[name]][0] - now for name, (x, _y) in data.items() if shown[name].any()), default=0.0)
        span = next((s for s in SPANS_S if -oldest <= s), SPANS_S[-1])
        for name, curve in self.curves.items():
            version = self.series[name].version
            if self.drawn.get(name) != version:
                curve.setData(*data[name])
                self.drawn[name] = version
                self.rebuilt += 1
        def highest(names) -> float:
            finite = {n: shown[n] & np.isfinite(data[n][1]) for n in names}
            return max((float(data[n][1][finite[n]].max()) for n in names if finite[n].any()), default=0.0)

        for key, plot in self.plots.items():
            left = [n for n in self.members[key] if n not in RIGHT_AXIS]
            right = [n for n in self.members[key] if n in RIGHT_AXIS]
            # The frame (ticks, grid) is painted again only when the span or the top steps.
            plot.set_x_span(span)
            # A share never runs past 100% (its axis read 200% once a value came near the top).
            plot.set_y_top(100.0 if key in PERCENT_PLOTS else nice_ceiling(highest(left) * 1.1))
            if right:
                plot.set_y2_top(math.ceil(nice_ceiling(highest(right) * 1.1)))
            plot.advance(now)  # "now" at x = 0: the axis stays "seconds ago" as time passes
        self.redraws += 1
        self.redrawn.emit()

    def apply_theme(self, dark: bool) -> None:
        for plot in self.plots.values():
            plot.set_colors("#111418" if dark else "#ffffff", FOREGROUND)
