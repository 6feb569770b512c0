"""Dark and light palettes that follow the system's colour scheme."""

from __future__ import annotations

import os
from app.core import env

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette

DARK = {"window": "#16191d", "base": "#0f1215", "alt": "#1c2026", "text": "#e5e7eb", "button": "#23272e",
        "highlight": "#2563eb", "mid": "#374151", "disabled": "#6b7280", "link": "#60a5fa"}
LIGHT = {"window": "#f5f6f8", "base": "#ffffff", "alt": "#f0f2f5", "text": "#111827", "button": "#e9ebef",
         "highlight": "#2563eb", "mid": "#c7cbd1", "disabled": "#9ca3af", "link": "#1d4ed8"}


# The Settings dialog's choice ("light", "dark"; None follows the system). HEARTH_THEME still wins: the
# screenshots and tests set it.
chosen: str | None = None
# Whether the system's own palette was dark, read before Hearth first set one of its own: read afterwards, the
# application's palette is Hearth's, and "follow the system" after a dark choice would stay dark.
_system_palette_dark: bool | None = None


def _palette_is_dark() -> bool:
    return QGuiApplication.palette().window().color().lightness() < 128


def system_prefers_dark() -> bool:
    forced = env.THEME.get()
    if forced in ("dark", "light"):
        return forced == "dark"
    if chosen in ("dark", "light"):
        return chosen == "dark"
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    return _palette_is_dark() if _system_palette_dark is None else _system_palette_dark


def palette_for(dark: bool) -> QPalette:
    c = {k: QColor(v) for k, v in (DARK if dark else LIGHT).items()}
    pal = QPalette()
    pal.setColor(QPalette.Window, c["window"])
    pal.setColor(QPalette.WindowText, c["text"])
    pal.setColor(QPalette.Base, c["base"])
    pal.setColor(QPalette.AlternateBase, c["alt"])
    pal.setColor(QPalette.Text, c["text"])
    pal.setColor(QPalette.Button, c["button"])
    pal.setColor(QPalette.ButtonText, c["text"])
    pal.setColor(QPalette.ToolTipBase, c["alt"])
    pal.setColor(QPalette.ToolTipText, c["text"])
    pal.setColor(QPalette.PlaceholderText, c["disabled"])
    pal.setColor(QPalette.Highlight, c["highlight"])
    pal.setColor(QPalette.HighlightedText, QColor("#ffffff"))
    pal.setColor(QPalette.Link, c["link"])
    pal.setColor(QPalette.Mid, c["mid"])
    for role in (QPalette.WindowText, QPalette.Text, QPalette.ButtonText):
        pal.setColor(QPalette.Disabled, role, c["disabled"])
    return pal


def apply_theme(app, dark: bool | None = None) -> bool:
    global _system_palette_dark
    if _system_palette_dark is None:
        _system_palette_dark = _palette_is_dark()
    dark = system_prefers_dark() if dark is None else dark
    app.setPalette(palette_for(dark))
    app.setProperty("hearth_dark", dark)
    for widget in app.topLevelWidgets():
        if hasattr(widget, "apply_theme"):
            widget.apply_theme(dark)
    return dark
