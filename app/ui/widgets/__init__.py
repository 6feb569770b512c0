"""Widgets more than one page uses.

StatusLine: a form's one-sentence outcome, errors in red. button: a push button, what it does and its tooltip;
copy_button: text to the clipboard.

wrapped, hbox, vbox, group, picking_table, combo: the parts every page builds its controls from (a sentence that
wraps, a row of buttons, a titled box, a table whose rows are chosen one at a time, a drop-down's choices).

ElidedLabel: one line that ends in "…" when the room is short (a long model name in the status bar would
otherwise set the window's minimum width past a small screen).

LiveText: text that changes several times a second (speed, context fill, the monitor's summary) and only
repaints, where a QLabel would make the whole window lay itself out again at every change.

VerticalScroll: a column that scrolls up and down, never narrower than its content and the scroll bar.

JobBar: one long job at a time (download, quantize, convert, a benchmark) with a progress bar and Cancel.

The job runs on a Tasks thread; its progress callback is throttled on that
thread (at most every PROGRESS_MS) before it crosses to the GUI thread, so a
download reporting per chunk never floods the event loop. Cancel sets the
job's threading.Event, which the core functions check between chunks/steps.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any, Callable

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QPainter, QPalette
from PySide6.QtWidgets import (QAbstractItemView, QApplication, QBoxLayout, QComboBox, QFrame, QGroupBox, QHBoxLayout,
                               QLabel, QLayout, QListWidget, QListWidgetItem, QProgressBar, QPushButton, QScrollArea,
                               QSizePolicy, QTableWidget, QVBoxLayout, QWidget)

from app.core.units import human_size
from app.ui.bridge.worker import Tasks

PROGRESS_MS = 100
SCALE = 1000  # the bar's range: QProgressBar takes ints, byte counts overflow them
STRETCH = 1  # in hbox() and vbox(): the room left over


def name_controls(field, name: str) -> None:
    """Give a control (or each unnamed control inside a row's container or layout) the name a screen reader says:
    its row's label. Without it a combo box is announced by its value and a box in a group by the group's title."""
    from PySide6.QtWidgets import QAbstractButton

    for control in _widgets_in(field):
        says_text = isinstance(control, QAbstractButton) and control.text()  # a button says its own text
        if control.focusPolicy() & Qt.TabFocus and not control.accessibleName() and not says_text:
            control.setAccessibleName(name)


def _widgets_in(field) -> list[QWidget]:
    if isinstance(field, QWidget):
        return [field, *field.findChildren(QWidget)]
    found = []
    for i in range(field.count()):  # a layout: its widgets and its nested layouts' widgets
        item = field.itemAt(i)
        found += _widgets_in(item.widget() or item.layout()) if (item.widget() or item.layout()) else []
    return found


def table(columns: int, name: str) -> QTableWidget:
    """A table that is one Tab stop, with the name a screen reader says. Qt's tables move between their cells with
    Tab, so Tab never left one with rows (the Models page's library took 70 presses and never let go, #55 B2):
    inside a table the arrow keys move, and Tab goes on to the next control."""
    view = QTableWidget(0, columns)
    view.setTabKeyNavigation(False)
    view.setAccessibleName(name)
    return view


def picking_table(headers: list[str], name: str) -> QTableWidget:
    """A read-only table whose rows are chosen one at a time (a library, a list of servers), without row numbers."""
    view = table(len(headers), name)
    view.setHorizontalHeaderLabels(headers)
    view.setSelectionBehavior(QAbstractItemView.SelectRows)
    view.setSelectionMode(QAbstractItemView.SingleSelection)
    view.setEditTriggers(QAbstractItemView.NoEditTriggers)
    view.verticalHeader().hide()
    return view


def chosen_row_text(view: QTableWidget) -> str | None:
    """The first cell of a picking table's chosen row: its name (an item's UserRole, when set, over its text)."""
    rows = view.selectionModel().selectedRows() if view.selectionModel() else []
    item = view.item(rows[0].row(), 0) if rows else None
    return (item.data(Qt.UserRole) or item.text()) if item is not None else None


def wrapped(text: str = "", name: str = "", color: str = "") -> QLabel:
    """A label whose words wrap, so that a long sentence never widens the page past the screen. name: the object
    name the theme and the tests know it by ("hint" is grey); color: a warning's."""
    label = QLabel(text)
    label.setWordWrap(True)
    if name:
        label.setObjectName(name)
    if color:
        label.setStyleSheet(f"color: {color}")
    return label


def _filled(layout: QBoxLayout, items: tuple, margin: int | None) -> QBoxLayout:
    if margin is not None:
        layout.setContentsMargins(margin, margin, margin, margin)
    for item in items:
        if isinstance(item, int):
            layout.addStretch(item)
            continue
        item, stretch = item if isinstance(item, tuple) else (item, 0)
        if isinstance(item, QLayout):
            layout.addLayout(item, stretch)
        else:
            layout.addWidget(item, stretch)
    return layout


def hbox(*items, parent: QWidget | None = None, margin: int | None = None) -> QHBoxLayout:
    """A row of items, left to right: a widget or a layout, (either, its stretch), or STRETCH for the room left.
    parent: the widget it lays out; margin: its margins, where not the style's."""
    return _filled(QHBoxLayout(parent), items, margin)


def vbox(*items, parent: QWidget | None = None, margin: int | None = None) -> QVBoxLayout:
    """A column of items, top to bottom, as hbox() takes them."""
    return _filled(QVBoxLayout(parent), items, margin)


def group(title: str, *items) -> QGroupBox:
    """A titled box holding a column of items (as hbox() takes them)."""
    box = QGroupBox(title)
    vbox(*items, parent=box)
    return box


class ElidedLabel(QLabel):
    """A one-line label that shortens its text with "…" to the width it gets; text() is the whole text."""

    SHORTEST = 80  # pixels it may shrink to

    def __init__(self, text: str = "", parent=None, shortest: int = SHORTEST, mode=Qt.ElideRight):
        super().__init__(parent)
        self._whole = ""
        self._shortest = shortest
        self._mode = mode  # Qt.ElideMiddle keeps a file name's end (its type) in view
        self.setText(text)

    def setText(self, text: str) -> None:
        self._whole = text
        self._elide()
        self.updateGeometry()

    def text(self) -> str:
        return self._whole

    def sizeHint(self) -> QSize:
        margins = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self._whole) + margins.left() + margins.right() + 2
        return QSize(width, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        return QSize(min(self._shortest, self.sizeHint().width()), super().minimumSizeHint().height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._whole, self._mode, max(0, self.contentsRect().width()))
        super().setText(shown)


class LiveText(QWidget):
    """A label for figures that change while an answer streams; text() and setText() as QLabel's.

    QLabel.setText always tells its parent's layout to recompute, and in the main window that ripples through
    the status bar, the monitor dock and the dock's animation objects: about a millisecond of the window's
    thread each time, several times a second while an answer streams, taken from the engine's threads
    (hearth bench gui). This widget keeps its size: one line grows to fit a longer text at once and gives
    room back only when cleared (a speed going from 99.9 to 100.0 tok/s moves nothing twice); `lines` > 1
    wraps in a fixed number of lines at whatever width the layout gives. A line that does not fit ends in "…";
    wrapped text past the last line is cut.
    """

    def __init__(self, text: str = "", lines: int = 1, parent=None):
        super().__init__(parent)
        self._text = ""
        self._lines = lines
        self._width = 0  # a one-line label's width: its longest text since it was last cleared
        self.setSizePolicy(QSizePolicy.Preferred if lines > 1 else QSizePolicy.Fixed, QSizePolicy.Fixed)
        # Its own background: a change repaints this widget, not the status bar or dock behind it too.
        self.setAutoFillBackground(True)
        self.setText(text)

    def text(self) -> str:
        return self._text

    def setText(self, text: str) -> None:
        if text == self._text:
            return
        self._text = text
        if self._lines == 1:
            margins = self.contentsMargins()
            need = self.fontMetrics().horizontalAdvance(text) + margins.left() + margins.right() + 2
            if need > self._width or not text:
                self._width = need
                self.updateGeometry()  # the one relayout: a wider text, or cleared
        self.update()

    def sizeHint(self) -> QSize:
        margins = self.contentsMargins()
        height = self._lines * self.fontMetrics().lineSpacing() + margins.top() + margins.bottom() + 2
        return QSize(self._width if self._lines == 1 else 0, height)

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().color(QPalette.WindowText))
        rect = self.contentsRect()
        if self._lines == 1:
            shown = self.fontMetrics().elidedText(self._text, Qt.ElideRight, rect.width())
            painter.drawText(rect, Qt.AlignLeft | Qt.AlignVCenter, shown)
        else:
            painter.drawText(rect, Qt.AlignLeft | Qt.AlignTop | Qt.TextWordWrap, self._text)


class VerticalScroll(QScrollArea):
    """A column that scrolls up and down, asking for its content's minimum width plus the vertical bar and its
    frame: the bar then never covers the content's right edge, nor calls up a horizontal bar to scroll the few
    pixels it takes (the load settings at 1024 px showed one that scrolled 8). Asked each time, so it follows
    the content as it grows (a longer GPU note, another runtime)."""

    def __init__(self, content: QWidget, parent: QWidget | None = None, name: str = "", flat: bool = False):
        """name: what a screen reader says; flat: no frame, nor a horizontal bar (the content narrows instead)."""
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setWidget(content)
        if name:
            self.setAccessibleName(name)
        if flat:
            self.setFrameShape(QFrame.NoFrame)
            self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        hint = super().minimumSizeHint()
        need = (self.widget().minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width()
                + 2 * self.frameWidth())
        return QSize(max(hint.width(), need), hint.height())


class JobBar(QWidget):
    job_finished = Signal(str, object)  # kind, result (None when it failed or was cancelled)
    job_failed = Signal(str)  # the sentence to show
    job_cancelled = Signal(str)  # kind: the user cancelled it (no error: nothing failed)

    def __init__(self, tasks: Tasks, parent=None):
        super().__init__(parent)
        self.tasks = tasks
        self.kind = ""
        self.cancel_event: threading.Event | None = None
        self.updates = 0  # progress updates that reached the widgets (tests check the throttle)
        # The job's title on a line of its own: beside the bar it had a third of a narrow pane and showed
        # "Quantizing smollm2-" of a model's name. Still too long, it loses its middle, not its type.
        self.label = ElidedLabel(mode=Qt.ElideMiddle)
        self.bar = QProgressBar()
        self.bar.setRange(0, SCALE)
        self.bar.setTextVisible(True)
        self.cancel_button = button("Cancel", self.cancel)
        vbox(self.label, hbox((self.bar, 1), self.cancel_button), parent=self, margin=0)
        tasks.progressed.connect(self._on_progressed)
        self.setVisible(False)

    @property
    def running(self) -> bool:
        return self.cancel_event is not None

    def start(self, kind: str, title: str, work: Callable[[Callable[..., None], threading.Event], Any]) -> bool:
        """Run work(report, cancel) on a thread; report(done, total, text='') updates the bar. False when busy."""
        if self.running:
            self.job_failed.emit(f"Wait for the {self.kind} that is running, or cancel it.")
            return False
        self.kind = kind
        cancel = self.cancel_event = threading.Event()
        last = [0.0]

        def report(done: float, total: float, text: str = "") -> None:
            now = time.monotonic()
            if (now - last[0]) * 1000 >= PROGRESS_MS or (total and done >= total):
                last[0] = now
                self.tasks.progress(f"job:{kind}", (float(done), float(total), text))

        self.label.setText(title)
        self.label.setToolTip(title)
        self.bar.setValue(0)
        self.bar.setFormat("starting…")
        self.cancel_button.setEnabled(True)
        self.setVisible(True)
        self.tasks.run(lambda: work(report, cancel), self._on_done, self._on_error, kind)
        return True

    def cancel(self) -> None:
        if self.cancel_event is not None:
            self.cancel_event.set()
            self.cancel_button.setEnabled(False)
            self.bar.setFormat("cancelling…")

    def _on_progressed(self, name: str, payload) -> None:
        if name != f"job:{self.kind}" or not self.running or self.cancel_event.is_set():
            return
        done, total, text = payload
        self.updates += 1
        if total > 0:
            self.bar.setValue(int(SCALE * min(done / total, 1.0)))
            size = f"{human_size(done)} of {human_size(total)}" if total > 4096 else f"{done / total:.0%}"
            self.bar.setFormat(f"{text}  {size}".strip() if text else size)
        else:
            self.bar.setFormat(text or "working…")

    def _end(self) -> None:
        self.cancel_event = None
        self.setVisible(False)

    def _on_done(self, result) -> None:
        kind = self.kind
        self._end()
        self.job_finished.emit(kind, result)

    def _on_error(self, message: str) -> None:
        cancelled = self.cancel_event is not None and self.cancel_event.is_set()
        kind = self.kind
        self._end()
        if cancelled:  # the work stopped because the user asked: said as news, never in red (#55 F)
            self.job_cancelled.emit(kind)
        else:
            self.job_failed.emit(message)


class StatusLine(QLabel):
    """One sentence under a form: how the last action went, errors in red."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextSelectableByMouse)

    def ok(self, text: str) -> None:
        self.setText(html.escape(text))

    def error(self, text: str) -> None:
        self.setText(f"<span style='color:#ef4444'>{html.escape(text)}</span>")


def button(text: str, clicked: Callable | None = None, tip: str = "") -> QPushButton:
    """A push button whose clicked signal calls clicked, with its tooltip."""
    made = QPushButton(text)
    if tip:
        made.setToolTip(tip)
    if clicked is not None:
        made.clicked.connect(clicked)
    return made


def combo(choices: dict) -> QComboBox:
    """A drop-down of choices ({value: label}) in their order; currentData() is the chosen one's value."""
    box = QComboBox()
    for value, label in choices.items():
        box.addItem(label, value)
    return box


def copy_button(text: Callable[[], str], label: str = "Copy", tip: str = "Copy to the clipboard") -> QPushButton:
    """A button that puts text() on the clipboard."""
    return button(label, lambda: QApplication.clipboard().setText(text()), tip)


class ChatChoice(QWidget):
    """A checklist of names chosen per chat (the chat page's Documents and Tools boxes). A new chat's choice is
    kept once it has an id (its first message); subclasses say where the names and the choice live."""

    changed = Signal()

    def __init__(self, tooltip: str, empty_text: str, max_height: int, parent=None):
        super().__init__(parent)
        self.conversation_id: int | None = None
        self._unsaved: list[str] = []  # chosen for a chat that has no id yet
        self.list = QListWidget()
        self.list.setMaximumHeight(max_height)
        self.list.setToolTip(tooltip)
        self.empty = wrapped(empty_text, "hint")
        vbox(self.list, self.empty, parent=self, margin=0)
        self.list.itemChanged.connect(self._on_item_changed)

    def refresh(self) -> None:
        raise NotImplementedError

    def _saved(self, conversation_id: int) -> list[str]:
        raise NotImplementedError

    def _save(self, names: list[str]) -> None:
        raise NotImplementedError

    def chosen(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())
                if self.list.item(i).checkState() == Qt.Checked]

    def chat_choice(self) -> list[str]:
        """What the open chat has chosen (kept, or not yet kept for a new chat)."""
        return self._saved(self.conversation_id) if self.conversation_id is not None else self._unsaved

    def _fill(self, names: list[str], chosen: list[str], tips: dict[str, str] | None = None) -> None:
        blocked = self.list.blockSignals(True)
        self.list.clear()
        for name in names:
            item = QListWidgetItem(name)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if name in chosen else Qt.Unchecked)
            if tips and name in tips:
                item.setToolTip(tips[name])
            self.list.addItem(item)
        self.list.blockSignals(blocked)
        self.list.setVisible(bool(names))
        self.empty.setVisible(not names)

    def show_conversation(self, conversation_id: int | None) -> None:
        self.conversation_id = conversation_id
        self._unsaved = []
        self.refresh()

    def conversation_created(self, conversation_id: int) -> None:
        """A new chat got its id: what was chosen before its first message is kept for it."""
        self.conversation_id = conversation_id
        self._save(self._unsaved)
        self._unsaved = []

    def _on_item_changed(self, _item) -> None:
        if self.conversation_id is None:
            self._unsaved = self.chosen()
        else:
            self._save(self.chosen())
        self.changed.emit()
