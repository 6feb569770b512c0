"""A white image to draw a benchmark chart on, with Qt (already a dependency) and no display needed."""

from __future__ import annotations

import os


def white_canvas(width: int, height: int):
    """(image, painter, app): an antialiased QPainter on a white ARGB image; keep app alive while drawing."""
    from PySide6.QtGui import QColor, QGuiApplication, QImage, QPainter

    if QGuiApplication.instance() is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # an image needs no display
    app = QGuiApplication.instance() or QGuiApplication(["hearth-bench"])  # fonts need an application
    image = QImage(width, height, QImage.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.Antialiasing)
    return image, painter, app
