"""The transcript's small icons, drawn from resources/icons rather than from a font.

The attachment mark was the emoji 📎, an empty box on a system without an emoji font (#49.19). The text keeps
the glyph (a chat's export and its copy are plain text); the transcript shows the icon in its place.
"""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtGui import QImage

from app.core.resources import resource_path

ICON_SCHEME = "hearth"
# glyph in the text -> (icon name, its file under resources/icons: twice the size shown, for high-DPI screens)
ICONS = {"📎": ("attachment", "icons/attachment-32.png")}
SHOWN_PX = 14


def with_icons(escaped_html: str) -> str:
    """HTML (already escaped) with each icon's glyph as the icon's image."""
    for glyph, (name, _file) in ICONS.items():
        escaped_html = escaped_html.replace(
            glyph, f"<img src='{ICON_SCHEME}:{name}' width='{SHOWN_PX}' height='{SHOWN_PX}' alt='{glyph}'>")
    return escaped_html


@lru_cache(maxsize=None)
def icon_image(name: str) -> QImage:
    file = next((f for n, f in ICONS.values() if n == name), None)
    return QImage(str(resource_path(file))) if file else QImage()
