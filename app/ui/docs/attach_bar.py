"""Attaching files to the next message: the paperclip button, files dropped on the chat, and a chip per file with
its size in tokens (click a chip to take it off). Files are read on a worker thread: a large PDF takes a while."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QPushButton, QToolButton, QWidget

from app.docs.conversation import ConversationDocs
from app.ui.bridge.worker import Tasks

FILTER = ("Documents (*.txt *.md *.markdown *.rst *.pdf *.docx *.html *.htm *.csv *.tsv *.py *.js *.ts *.c *.h "
          "*.cpp *.java *.go *.rs *.json *.yaml *.yml *.toml *.ini *.log);;All files (*)")


class AttachBar(QWidget):
    changed = Signal()  # the pending attachments changed
    problem = Signal(str)  # a file that cannot be attached, in one sentence

    def __init__(self, docs: ConversationDocs, model_path, parent=None):
        """model_path(): the chat model's file (its vocabulary counts the tokens), or None."""
        super().__init__(parent)
        self.docs = docs
        self.model_path = model_path
        self.pending: list = []  # app.docs.attach.Attachment, in the order attached
        self.tasks = Tasks(self)
        # A word, not a paperclip glyph: without an emoji font (offscreen, many minimal desktops) the glyph is a
        # box; and a tool button is as wide as its text, where a push button wants 80 px.
        self.button = QToolButton()
        self.button.setText("Attach…")
        self.button.setObjectName("attachButton")
        self.button.setToolTip("Attach files to the next message (or drop them on the chat): text, Markdown, code, "
                               "PDF, DOCX, HTML, CSV")
        self.chips = QHBoxLayout()
        self.chips.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.button)
        row.addLayout(self.chips)
        row.addStretch(1)
        self.button.clicked.connect(self._on_button_clicked)

    def _on_button_clicked(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files", "", FILTER)
        self.add_paths(paths)

    def add_paths(self, paths: list[str]) -> None:
        model = self.model_path()
        for path in paths:
            self.tasks.run(lambda path=path: self.docs.read(path, model), self._on_read, self.problem.emit,
                           name="attach")

    def _on_read(self, attachment) -> None:
        if any(a.path == attachment.path for a in self.pending):
            return
        self.pending.append(attachment)
        self._show()

    def remove(self, index: int) -> None:
        del self.pending[index]
        self._show()

    def take(self) -> list:
        """The pending attachments, which go with the message being sent; the bar is empty after."""
        taken, self.pending = self.pending, []
        self._show()
        return taken

    def _show(self) -> None:
        while self.chips.count():
            item = self.chips.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        for i, a in enumerate(self.pending):
            chip = QPushButton(f"{a.name} · {a.tokens:,} tokens  ✕")
            chip.setObjectName("attachmentChip")
            chip.setFlat(True)
            chip.setToolTip(f"{a.path}\nClick to take it off this message")
            chip.clicked.connect(lambda _=False, i=i: self.remove(i))
            self.chips.addWidget(chip)
        self.changed.emit()

    def join(self) -> None:
        self.tasks.join()


class FileDrops(QObject):
    """Files dropped on the widgets it watches (the transcript, the message box) are attached, not pasted as text."""

    def __init__(self, bar: AttachBar, widgets: list):
        super().__init__(bar)
        self.bar = bar
        for w in widgets:
            w.setAcceptDrops(True)
            w.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        kind = event.type()
        if kind in (QEvent.DragEnter, QEvent.DragMove) and self._files(event):
            event.acceptProposedAction()
            return True
        if kind == QEvent.Drop and self._files(event):
            event.acceptProposedAction()
            self.bar.add_paths(self._files(event))
            return True
        return False

    @staticmethod
    def _files(event) -> list[str]:
        mime = event.mimeData()
        if mime is None or not mime.hasUrls():
            return []
        return [u.toLocalFile() for u in mime.urls() if u.isLocalFile()]
