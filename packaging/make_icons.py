"""Render resources/icons/hearth.svg into the PNG sizes, a Windows .ico and a macOS .icns.

    python packaging/make_icons.py

Run it after editing the SVG and commit the results (they are small). Qt's own SVG renderer does the
drawing (QtSvg ships in PySide6-Essentials); the .ico and .icns containers are written here, with PNG
images inside, which Windows Vista+ and macOS 10.7+ read.
"""

from __future__ import annotations

import io
import os
import struct
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parents[1] / "resources" / "icons"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# Apple's PNG-capable icon types and their pixel sizes (the @2x types reuse the larger renders).
ICNS_TYPES = ((b"icp4", 16), (b"icp5", 32), (b"icp6", 64), (b"ic07", 128), (b"ic08", 256), (b"ic09", 512),
              (b"ic10", 1024), (b"ic11", 32), (b"ic12", 64), (b"ic13", 256), (b"ic14", 512))


def render(svg: Path, sizes) -> dict[int, bytes]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (Qt needs one)
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg} is not a valid SVG")
    images = {}
    for size in sorted(set(sizes)):
        image = QImage(size, size, QImage.Format_ARGB32_Premultiplied)
        image.fill(Qt.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.Antialiasing)
        painter.setRenderHint(QPainter.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        data = QByteArray()
        buffer = QBuffer(data)
        buffer.open(QIODevice.WriteOnly)
        image.save(buffer, "PNG")
        images[size] = bytes(data)
    return images


def ico(images: dict[int, bytes]) -> bytes:
    header = struct.pack("<HHH", 0, 1, len(ICO_SIZES))
    directory, blobs = io.BytesIO(), io.BytesIO()
    offset = 6 + 16 * len(ICO_SIZES)
    for size in ICO_SIZES:
        png = images[size]
        # A width or height of 0 means 256.
        directory.write(struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(png), offset))
        blobs.write(png)
        offset += len(png)
    return header + directory.getvalue() + blobs.getvalue()


def icns(images: dict[int, bytes]) -> bytes:
    body = b"".join(kind + struct.pack(">I", 8 + len(images[size])) + images[size] for kind, size in ICNS_TYPES)
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    images = render(ICONS / "hearth.svg", PNG_SIZES + tuple(size for _, size in ICNS_TYPES))
    for size in PNG_SIZES:
        (ICONS / f"hearth-{size}.png").write_bytes(images[size])
    (ICONS / "hearth.ico").write_bytes(ico(images))
    (ICONS / "hearth.icns").write_bytes(icns(images))
    print(f"wrote {len(PNG_SIZES)} PNGs, hearth.ico and hearth.icns to {ICONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
