"""Attaching files to the next message: the Attach… button, files dropped on the chat, an image pasted into the
message box, and a chip per file (click a chip to take it off). A document shows its size in tokens and is read on
a worker thread (a large PDF takes a while); an image or a sound (#53) is known by its first bytes, checked at once
(app/protocol/media.py: a damaged or oversized file is one sentence), and shows a thumbnail or its length."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QBuffer, QEvent, QIODevice, QObject, QSize, Qt, Signal
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import QFileDialog, QPushButton, QToolButton, QWidget

from app.core.errors import HearthError
from app.docs.conversation import ConversationDocs
from app.protocol.media import IMAGE_FORMATS, Media, MediaError, check_media, read_medium, sniff
from app.ui.bridge.worker import Tasks
from app.ui.widgets import STRETCH, hbox

FILTER = ("Documents, images and sounds (*.txt *.md *.markdown *.rst *.pdf *.docx *.html *.htm *.csv *.tsv *.py *.js "
          "*.ts *.c *.h *.cpp *.java *.go *.rs *.json *.yaml *.yml *.toml *.ini *.log *.png *.jpg *.jpeg *.gif *.bmp "
          "*.webp *.wav *.mp3 *.flac);;Images (*.png *.jpg *.jpeg *.gif *.bmp *.webp);;Sounds (*.wav *.mp3 *.flac);;"
          "All files (*)")
THUMB = 32  # a chip's thumbnail, in pixels


def media_kind(path: str) -> str | None:
    """"image" or "audio" where the file's first bytes say so, else None (a document, or unreadable)."""
    try:
        with open(path, "rb") as f:
            fmt = sniff(f.read(16) + b"\0" * 16)  # BMP's check wants 26 bytes; the header's 16 decide
    except OSError:
        return None
    return None if fmt is None else "image" if fmt in IMAGE_FORMATS else "audio"


def thumbnail(data: bytes, size: int) -> QPixmap:
    """An image scaled to fit size x size (empty where Qt cannot decode it: the chip then shows its name alone)."""
    image = QImage.fromData(data)
    if image.isNull():
        return QPixmap()
    return QPixmap.fromImage(image.scaled(size, size, Qt.KeepAspectRatio, Qt.SmoothTransformation))


def png_bytes(image: QImage) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(buffer.data())


class AttachBar(QWidget):
    changed = Signal()  # the pending attachments changed
    problem = Signal(str)  # a file that cannot be attached, in one sentence
    media_added = Signal(object)  # an image or a sound (app.protocol.media.Media) now pending

    def __init__(self, docs: ConversationDocs, model_path, parent=None):
        """model_path(): the chat model's file (its vocabulary counts the tokens), or None."""
        super().__init__(parent)
        self.docs = docs
        self.model_path = model_path
        self.pending: list = []  # app.docs.attach.Attachment, in the order attached
        self.media: list[Media] = []  # images and sounds, in the order attached
        self.tasks = Tasks(self)
        # A word, not a paperclip glyph: without an emoji font (offscreen, many minimal desktops) the glyph is a
        # box; and a tool button is as wide as its text, where a push button wants 80 px.
        self.button = QToolButton()
        self.button.setText("Attach…")
        self.button.setObjectName("attachButton")
        self.button.setToolTip("Attach files to the next message (or drop them on the chat, or paste an image): "
                               "text, Markdown, code, PDF, DOCX, HTML, CSV; images and sounds for a model that "
                               "sees or hears")
        self.chips = hbox(margin=0)
        hbox(self.button, self.chips, STRETCH, parent=self, margin=0)
        self.button.clicked.connect(self._on_button_clicked)

    def _on_button_clicked(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files", "", FILTER)
        self.add_paths(paths)

    def add_paths(self, paths: list[str]) -> None:
        model = self.model_path()
        for path in paths:
            kind = media_kind(path)
            if kind is not None:
                try:
                    self._add_checked(read_medium(kind, Path(path)))
                except HearthError as exc:  # a damaged or oversized file, or one that cannot be read
                    self.problem.emit(str(exc))
                continue
            self.tasks.run(lambda path=path: self.docs.read(path, model), self._on_read, self.problem.emit,
                           name="attach")

    def add_medium(self, kind: str, data: bytes, name: str) -> bool:
        """An image or a sound for the next message, checked from its headers (a sentence where it cannot be)."""
        try:
            medium = check_media(kind, data, name)
        except MediaError as exc:
            self.problem.emit(str(exc))
            return False
        self._add_checked(medium)
        return True

    def _add_checked(self, medium: Media) -> None:
        if not any(m.digest == medium.digest for m in self.media):
            self.media.append(medium)
            self._show()
            self.media_added.emit(medium)

    def add_image(self, image: QImage, name: str = "pasted image.png") -> bool:
        """An image from the clipboard, as a PNG."""
        return not image.isNull() and self.add_medium("image", png_bytes(image), name)

    def _on_read(self, attachment) -> None:
        if any(a.path == attachment.path for a in self.pending):
            return
        self.pending.append(attachment)
        self._show()

    def remove(self, index: int) -> None:
        del self.pending[index]
        self._show()

    def remove_medium(self, index: int) -> None:
        del self.media[index]
        self._show()

    def take(self) -> list:
        """The pending documents, which go with the message being sent; the bar has none after."""
        taken, self.pending = self.pending, []
        self._show()
        return taken

    def take_media(self) -> list[Media]:
        """The pending images and sounds, which go with the message being sent; the bar has none after."""
        taken, self.media = self.media, []
        self._show()
        return taken

    def _show(self) -> None:
        while self.chips.count():
            item = self.chips.takeAt(0)
            if item.widget():
                item.widget().hide()  # at once: deleteLater waits for the event loop, and it was drawn meanwhile
                item.widget().deleteLater()
        for i, a in enumerate(self.pending):
            chip = QPushButton(f"{a.name} · {a.tokens:,} tokens  ✕")
            chip.setObjectName("attachmentChip")
            chip.setFlat(True)
            chip.setToolTip(f"{a.path}\nClick to take it off this message")
            chip.clicked.connect(lambda _=False, i=i: self.remove(i))
            self.chips.addWidget(chip)
        for i, m in enumerate(self.media):
            label = m.name or m.format
            chip = QPushButton(f"{label} · {m.seconds:.1f} s  ✕" if m.kind == "audio" else f"{label}  ✕")
            chip.setObjectName("mediaChip")
            chip.setFlat(True)
            if m.kind == "image":
                chip.setIcon(QIcon(thumbnail(m.data, THUMB)))
                chip.setIconSize(QSize(THUMB, THUMB))
            chip.setToolTip(f"{m.describe()}\nClick to take it off this message")
            chip.setAccessibleName(f"Attached {m.kind}: {label}. Press to take it off")
            chip.clicked.connect(lambda _=False, i=i: self.remove_medium(i))
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
