"""The chat page's images and sounds (#53): what the loaded model can take, said as soon as one is attached; the
media kept with the question in the chat store (once per content hash, app/core/chats/store.py), sent with it
as the seam's parts (app/core/chats/prompt.py), shown as thumbnails in the transcript and opened larger on a
click. A mixin of ChatView (app/ui/chat/chat_view.py), whose state it shares."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QDialog, QLabel, QScrollArea

from app.core.chats.store import MEDIA
from app.protocol.media import REMOTE_TEXT_ONLY, media_part, refusal
from app.ui.widgets import vbox
from app.ui.widgets.notices import ERROR, WARNING, Notice, cleared

LARGE = 900  # an image opened from the transcript fits this many pixels on its longer side


class MediaTurns:
    def _wire_media(self) -> None:
        self.input.image_pasted.connect(lambda image: self.attach_bar.add_image(image))
        self.input.files_pasted.connect(self.attach_bar.add_paths)
        self.attach_bar.media_added.connect(self._on_media_added)
        self.transcript.media_source = self.store.media_data
        self.transcript.media_requested.connect(self.open_media)
        self.bridge.model_loaded.connect(lambda *_: self._recheck_pending_media())

    def media_refusal(self, kinds) -> str | None:
        """Why the loaded model cannot take media of these kinds, in plain words and naming where to get what it
        lacks; None when it can (or nothing is loaded yet: it is said again at Send)."""
        info = self.bridge.info if self.bridge.ready else None
        if not info:
            return None
        if self.bridge.remote and info.get("media") is None:
            return None  # a server that does not say what its model takes answers a medium for itself
        name, media = model_name(info), info.get("media") or {}
        for kind in dict.fromkeys(kinds):
            # In the window's words where no projector was loaded: no command-line flag, and where to get one.
            why = refusal(name, media, kind, no_projector=REMOTE_TEXT_ONLY if self.bridge.remote else
                          "it has no projector. Put its mmproj-*.gguf file (on the model's Hugging Face page) beside "
                          "it and load it again, or choose a model that " + ("sees" if kind == "image" else "hears"))
            if why is not None:
                return why
        return None

    def _pending_refusal(self) -> str | None:
        """media_refusal for what is attached now (None with nothing attached)."""
        pending = self.attach_bar.media
        return self.media_refusal([m.kind for m in pending]) if pending else None

    def _on_media_added(self, medium) -> None:
        why = self.media_refusal([medium.kind])
        if why:
            self.noticed.emit(Notice(why, WARNING, "chat.attach"))

    def _recheck_pending_media(self) -> None:
        """Another model loaded: what is attached is said again for it, or the old sentence goes."""
        why = self._pending_refusal()
        self.noticed.emit(Notice(why, WARNING, "chat.attach") if why else cleared("chat.attach"))

    def _refuse_pending_media(self) -> bool:
        """Before Send: media the model cannot take stay attached, the message stays in the box, and it is said."""
        why = self._pending_refusal()
        if why:
            self.noticed.emit(Notice(f"{why} Your message was not sent; it is still in the box.", ERROR,
                                     "chat.attach"))
        return bool(why)

    def _keep_media(self, kept: list | None = None) -> list[dict]:
        """The pending images and sounds into the store (once each), after those the message already had."""
        refs = list(kept or [])
        for medium in list(self.attach_bar.media):  # taken off the box only once all are kept: a busy store
            ref = self.store.keep_media(medium.kind, medium.name, medium.data)  # leaves them attached
            if ref["digest"] not in {r.get("digest") for r in refs}:
                refs.append(ref)
        self.attach_bar.take_media()
        return refs

    def media_part_of(self, ref: dict) -> dict | None:
        data = self.store.media_data(str(ref.get("digest", "")))
        return media_part(ref.get("kind", "image"), data, ref.get("name", "")) if data else None

    def open_media(self, digest: str) -> None:
        """A question's image, larger, in a dialog of its own (Esc closes it); a sound says its name."""
        data = self.store.media_data(digest)
        image = QImage.fromData(data) if data else QImage()
        dialog = QDialog(self)
        dialog.setWindowTitle("Attached image" if not image.isNull() else "Attachment")
        label = QLabel()
        label.setAlignment(Qt.AlignCenter)
        if image.isNull():
            label.setText("This attachment is a sound, or its bytes are no longer in the chat history.")
        else:
            if max(image.width(), image.height()) > LARGE:
                image = image.scaled(LARGE, LARGE, Qt.KeepAspectRatio, Qt.SmoothTransformation)
            label.setPixmap(QPixmap.fromImage(image))
            label.setAccessibleName(f"Attached image, {image.width()} by {image.height()} pixels")
        scroll = QScrollArea()
        scroll.setWidget(label)
        scroll.setWidgetResizable(True)
        vbox(scroll, parent=dialog)
        self.opened_media = dialog  # a test (and the user) can find it
        dialog.open()


def model_name(info: dict) -> str:
    from pathlib import Path

    return info.get("model") or Path(info.get("path") or "This model").name.removesuffix(".gguf")


def message_media(meta: dict) -> list[dict] | None:
    return [r for r in meta.get(MEDIA) or [] if isinstance(r, dict)] or None
