"""One window per data folder: a second start hands over to the first, as desktop apps do.

Two windows on one Hearth folder would both write the chat history and the settings (one instance's
write-ahead log deleted under another lost 50 chats). The first window listens on a local socket named
after the data folder; a second start finds it, asks it to come to the front, and exits.
"""

from __future__ import annotations

import hashlib
import os

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from app.core import paths

CONNECT_MS = 500
RAISE = b"raise\n"


def server_name() -> str:
    folder = os.path.realpath(str(paths.data_dir()))
    user = os.environ.get("USER") or os.environ.get("USERNAME") or ""
    return "hearth-" + hashlib.sha256(f"{user}:{folder}".encode()).hexdigest()[:16]


def hand_over_to_running() -> bool:
    """True when a window already runs on this data folder (and was asked to come to the front)."""
    socket = QLocalSocket()
    socket.connectToServer(server_name())
    if not socket.waitForConnected(CONNECT_MS):
        return False
    socket.write(RAISE)
    socket.waitForBytesWritten(CONNECT_MS)
    socket.disconnectFromServer()
    return True


class InstanceServer(QObject):
    """The first window's side: another start asks it to come to the front."""

    raise_requested = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.server = QLocalServer(self)
        name = server_name()
        if not self.server.listen(name):
            # A socket left by a window that crashed: nobody answered on it (hand_over_to_running said so).
            QLocalServer.removeServer(name)
            self.server.listen(name)
        self.server.newConnection.connect(self._on_connection)

    def _on_connection(self) -> None:
        while self.server.hasPendingConnections():
            conn = self.server.nextPendingConnection()
            conn.readyRead.connect(lambda c=conn: self._on_message(c))

    def _on_message(self, conn: QLocalSocket) -> None:
        if bytes(conn.readAll()).startswith(RAISE.strip()):
            self.raise_requested.emit()
        conn.disconnectFromServer()

    def close(self) -> None:
        self.server.close()
