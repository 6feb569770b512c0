"""What a loaded model can do with images and sounds, and a chat's media on their way to the decoder.

The session's one door to media: at load it opens the projector the options name (--mmproj), else the one the
library pairs with the model (app/core/library/projectors.py); a projector that cannot be used is a sentence in
the load's description (`media.mmproj_error`) and the model answers text. Per request it turns the seam's media
parts (app/protocol/media.py) into markers in the text the template renders, and the rendered prompt into a
MediaPrompt for the decoder.
"""

from __future__ import annotations

import contextlib
import sys

from app.core.errors import InvalidRequest
from app.core.library.projectors import chosen_projector
from app.engine.media.projector import Projector, ProjectorError
from app.protocol.media import Media, flatten, has_media


class NoProjector(InvalidRequest):
    """A medium sent to a model that has no projector (an API client gets a 400 that names the model)."""


class SessionMedia:
    def __init__(self, rt):
        self.rt = rt
        self.projector: Projector | None = None
        self.error: str | None = None
        self.paired = False  # found beside the model, not named by --mmproj
        chosen, self.paired = chosen_projector(rt.path, rt.options.mmproj)
        if chosen is None:
            return
        try:
            self.projector = Projector(rt, chosen)
        except ProjectorError as exc:
            self.error = str(exc)
            print(f"hearth: {self.error}", file=sys.stderr)

    @property
    def model_name(self) -> str:
        return self.rt.path.name

    def describe(self) -> dict:
        if self.projector is None:
            return {"vision": False, "audio": False, "mmproj": None, "mmproj_error": self.error}
        return {**self.projector.describe(), "paired": self.paired, "mmproj_error": None}

    def take(self, messages: list[dict]) -> tuple[list[dict], list[Media]]:
        """(the messages with their media parts as markers, the media checked and in order); the messages as
        they are where none has media."""
        if not has_media(messages):
            return messages, []
        if self.projector is None:
            why = f" ({self.error})" if self.error else ""
            raise NoProjector(f"{self.model_name} cannot see images or hear sounds: it is loaded without a projector"
                              f"{why}. Load it with its mmproj file (--mmproj PATH, or put the mmproj-*.gguf beside "
                              "the model), or send text only.")
        flat, media = flatten(messages, self.projector.marker)
        self.projector.refuse_unsupported(media, self.model_name)
        return flat, media

    @contextlib.contextmanager
    def prompt(self, text: str, media: list[Media], literal, tokenize):
        """The rendered prompt as a MediaPrompt for the decoder; libmtmd's chunks are freed when the answer has
        begun (they are evaluated by then)."""
        from app.engine.media.prompt import MediaPrompt

        pieces = MediaPrompt(self.projector, self.rt, text, media, literal, tokenize)
        try:
            yield pieces
        finally:
            pieces.close()

    def close(self) -> None:
        if self.projector is not None:
            self.projector.close()
            self.projector = None
