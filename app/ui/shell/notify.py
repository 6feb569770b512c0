"""A desktop notification when a long job (a download, a quantize or convert, a benchmark) ends while the window
is not the active one: the user went elsewhere while it ran and would not see the page's own sentence.

The system tray's balloon (QSystemTrayIcon.showMessage: a freedesktop notification on Linux desktops, a toast on
Windows, Notification Center on macOS) where there is a tray; where there is none (some Wayland desktops, a bare
X server, offscreen) the window asks for attention instead (QApplication.alert: the taskbar entry flashes), and
the page's sentence waits in the status bar. Nothing here may fail a job's end: it is news, not the job."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QApplication, QStyle, QSystemTrayIcon, QWidget

SHOWN_MS = 8000  # how long the balloon stays; the tray icon goes with it (Hearth keeps no icon in the tray)


class Notifier(QObject):
    def __init__(self, window: QWidget):
        super().__init__(window)
        self.window = window
        self.tray: QSystemTrayIcon | None = None  # made at the first notification, where a tray exists
        self.sent: list[tuple[str, str, str]] = []  # (title, message, how: "tray" or "alert"), newest last
        self._hide = QTimer(self, singleShot=True, timeout=lambda: self.tray is not None and self.tray.hide())

    def job_ended(self, title: str, message: str) -> bool:
        """Tell the user a job ended, unless they are looking at the window; True when told."""
        if self.window.isActiveWindow():
            return False
        try:
            if QSystemTrayIcon.isSystemTrayAvailable() and QSystemTrayIcon.supportsMessages():
                if self.tray is None:
                    icon = QApplication.windowIcon()
                    if icon.isNull():  # a tray icon without an image is refused (and warned about)
                        icon = self.window.style().standardIcon(QStyle.SP_MessageBoxInformation)
                    self.tray = QSystemTrayIcon(icon, self)
                    self.tray.setToolTip("Hearth")
                    self.tray.messageClicked.connect(self._bring_back)
                self.tray.show()
                self.tray.showMessage(title, message, QSystemTrayIcon.Information, SHOWN_MS)
                self._hide.start(SHOWN_MS + 2000)
                how = "tray"
            else:
                QApplication.alert(self.window)
                how = "alert"
        except RuntimeError:  # a platform that refuses both: the status bar still has the sentence
            return False
        self.sent.append((title, message, how))
        return True

    def _bring_back(self) -> None:
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()
