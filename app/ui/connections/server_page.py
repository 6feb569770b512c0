"""The Server page: serve the window's model as an OpenAI-compatible API, as `hearth serve` does.

Address, port, a generated key (with copy), CORS origins, start/stop, copyable curl and Python
snippets for the running address, and a live request log. The server runs on a thread of the window
(app.ui.bridge.background_server) over the window's own local engine, so the model is not loaded twice and
the Chat page keeps working while the API serves. Each finished request is reported on the server's
thread and crosses to the GUI thread as a queued signal.

Starting and stopping run off the GUI thread (app.ui.bridge.worker.Tasks): a start opens the MCP servers offered, each
up to its connect timeout, and a stop lets the requests in flight finish for up to STOP_TIMEOUT_S; the window
stays live meanwhile, its buttons saying "Starting…" or "Stopping…".

The address, port and CORS origins are kept in the settings file; the key goes to the system keyring
(app.core.api_keys), so the editors and scripts configured with it keep working after a restart.

"Offer these MCP servers to API clients" (off by default, #45) is `hearth serve --tools`: the servers ticked are
started with the API, a Responses request can name them as mcp tools, and only the tools the user allowed for good
(Always) run for a client, which cannot answer the window's approval dialog.
"""

from __future__ import annotations

import secrets
import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QFormLayout, QGroupBox, QHeaderView, QLabel, QLineEdit,
                               QListWidget, QListWidgetItem, QPlainTextEdit, QTableWidgetItem, QTabWidget, QWidget)

from app.ui.widgets.notices import ERROR, Notice, cleared
from app.core import paths
from app.core.api_keys import KeyStore
from app.core.errors import HearthError
from app.backends.backend import Backend
from app.server.openai.endpoints import RequestRecord, model_id
from app.server.options import ServeOptions
from app.ui.widgets.clamped_spin import ClampingSpinBox
from app.ui.bridge.background_server import BackgroundServer, base_url
from app.ui.chat.transcript import Transcript
from app.ui.widgets import STRETCH, StatusLine, button, copy_button, group, hbox, table, vbox
from app.ui.bridge.worker import Tasks

LOG_COLUMNS = ["Time", "Endpoint", "Status", "Tokens", "Duration"]
MAX_LOG_ROWS = 500  # oldest rows go first: a busy server must not grow the table without bound
SETTINGS_KEY = "server"
KEY_ACCOUNT = "Hearth's own API server"  # its key's name in the keyring, beside the remote servers' URLs


def new_key() -> str:
    return "hearth-" + secrets.token_hex(16)


def curl_snippet(url: str, key: str | None, model: str) -> str:
    auth = f' \\\n  -H "Authorization: Bearer {key}"' if key else ""
    return (f'curl {url}/chat/completions{auth} \\\n  -H "Content-Type: application/json" \\\n'
            f'  -d \'{{"model": "{model}", "max_tokens": 64,\n'
            '       "messages": [{"role": "user", "content": "Hello!"}]}\'')


def python_snippet(url: str, key: str | None, model: str) -> str:
    return (f'from openai import OpenAI\n\nclient = OpenAI(base_url="{url}", api_key="{key or "none"}")\n'
            f'stream = client.chat.completions.create(\n    model="{model}",\n    max_tokens=64,\n'
            '    messages=[{"role": "user", "content": "Hello!"}],\n    stream=True,\n)\n'
            'for chunk in stream:\n    print(chunk.choices[0].delta.content or "", end="", flush=True)\n')


def tokens_text(record: RequestRecord) -> str:
    if record.prompt_tokens is None and record.completion_tokens is None:
        return ""
    return f"{record.prompt_tokens or 0} in · {record.completion_tokens or 0} out"


class ServerPage(QWidget):
    noticed = Signal(object)  # a Notice (app.ui.widgets.notices) for the window's status bar
    request_logged = Signal(object)  # RequestRecord; emitted on the server's thread, delivered queued
    serving_changed = Signal(bool)  # a start or stop has ended: whether the server runs now

    def __init__(self, backend: Backend, settings: dict | None = None, keys: KeyStore | None = None, parent=None,
                 bridge=None):
        """backend: the engine served (the window's local one); bridge: the window's EngineBridge, whose loads
        the snippets follow (the model's name in them)."""
        super().__init__(parent)
        self.backend = backend
        self.settings = settings if settings is not None else {}
        # The server's key outlives a session without a keyring too: editors set up with it must keep working.
        self.keys = keys or KeyStore(fallback=paths.server_key_file())
        self.server = BackgroundServer(backend, self.request_logged.emit)
        self.tasks = Tasks(self)
        self.changing = ""  # "start" or "stop" while one runs on its thread
        kept = self.settings.get(SETTINGS_KEY) or {}  # as app/ui/settings/shape.py declares it

        self.host = QLineEdit(str(kept.get("host") or ServeOptions.host))
        self.host.setAccessibleName("Address to listen on")
        self.host.setToolTip("127.0.0.1 serves this computer only; 0.0.0.0 serves the network (needs a key)")
        self.port = ClampingSpinBox("The port")
        self.port.setRange(1, 65535)
        self.port.setValue(kept.get("port", ServeOptions.port))
        self.api_key = QLineEdit(placeholderText="none (this computer only)")
        self.api_key.setAccessibleName("API key")
        self.new_key_button = button("New key", lambda: self._show_key(new_key()))
        self.copy_key_button = copy_button(self.api_key.text, "Copy key")
        self.cors = QLineEdit(" ".join(kept.get("cors") or []))
        self.cors.setAccessibleName("CORS origins")
        self.cors.setPlaceholderText("origins allowed to call from a browser, e.g. http://localhost:3000 (space-separated)")
        self.offer_tools = QCheckBox("Offer these MCP servers to API clients")
        self.offer_tools.setChecked(kept.get("offer_tools") is True)  # off unless the user turned it on
        self.offer_tools.setToolTip("As hearth serve --tools: a Responses request may name a server ticked here as "
                                    "an mcp tool. Only the tools you allowed for good (Always) run for a client; "
                                    "any other call is refused, and the model is told why")
        self.tools_in_chat = QCheckBox("Also in chat completions")
        self.tools_in_chat.setChecked(kept.get("tools_in_chat") is True)
        self.tools_in_chat.setToolTip("As hearth serve --tools-in-chat: a /v1/chat/completions request may name them "
                                      "too; the calls the server ran come back under the message's mcp_calls")
        self.tool_servers = QListWidget()
        self.tool_servers.setMaximumHeight(90)
        self.no_tool_servers = QLabel("No MCP servers yet: the Tools page adds them.")
        self.no_tool_servers.setObjectName("hint")
        self._offered = list(kept.get("tools") or [])
        self.start_button = button("Start server", self.start)
        self.stop_button = button("Stop", self.stop)
        self.status = StatusLine()

        self.curl = self._snippet_box("Example with curl")
        self.python = self._snippet_box("Example in Python")
        self.log = table(len(LOG_COLUMNS), "Requests served")
        self.log.setHorizontalHeaderLabels(LOG_COLUMNS)
        self.log.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.log.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.log.verticalHeader().hide()
        self.log.horizontalHeader().setSectionResizeMode(1, QHeaderView.Stretch)

        self._lay_out()
        self.request_logged.connect(self._on_request_logged)
        for edit in (self.host, self.api_key):
            edit.textChanged.connect(self.update_snippets)
        self.port.valueChanged.connect(self.update_snippets)
        self.offer_tools.toggled.connect(self._update_state)
        self.refresh_tool_servers()
        if bridge is not None:
            bridge.model_loaded.connect(self.update_snippets)
        self._show_key(self.keys.get(KEY_ACCOUNT) or new_key())
        self._update_state()

    def _show_key(self, key: str) -> None:
        self.api_key.setText(key)
        self.api_key.setCursorPosition(0)  # show where the key starts, not where it ends

    @staticmethod
    def _snippet_box(name: str) -> QPlainTextEdit:
        box = QPlainTextEdit()
        box.setAccessibleName(name)
        box.setReadOnly(True)
        box.setFont(Transcript.monospace())
        box.setLineWrapMode(QPlainTextEdit.WidgetWidth)  # wrapping is only shown: Copy takes the lines as written
        return box

    def _lay_out(self) -> None:
        form_box = QGroupBox("OpenAI-compatible server")
        form = QFormLayout(form_box)
        form.addRow("Address and port", hbox((self.host, 1), self.port))
        form.addRow("API key", hbox((self.api_key, 1), self.new_key_button, self.copy_key_button))
        form.addRow("CORS origins", self.cors)
        form.addRow("", self.offer_tools)
        form.addRow("", self.tools_in_chat)
        form.addRow("", self.tool_servers)
        form.addRow("", self.no_tool_servers)
        form.addRow("", hbox(self.start_button, self.stop_button, STRETCH))
        form.addRow("", self.status)

        snippets = QTabWidget()
        for title, box in (("curl", self.curl), ("Python (openai)", self.python)):
            page = QWidget()
            vbox((box, 1), hbox(STRETCH, copy_button(box.toPlainText)), parent=page, margin=4)
            snippets.addTab(page, title)
        top = hbox((form_box, 1), (group("Try it", snippets), 1))
        vbox(top, (group("Requests", self.log), 1), parent=self, margin=6)

    # --- settings ------------------------------------------------------------
    def refresh_tool_servers(self) -> None:
        """The user's MCP servers (mcp.json), those offered before ticked."""
        from app.tools.servers import load_servers

        try:
            names = sorted(load_servers())
        except HearthError as exc:  # a damaged mcp.json: its sentence, and nothing offered
            names = []
            self.no_tool_servers.setText(str(exc))
        chosen = self.chosen_tool_servers() if self.tool_servers.count() else self._offered
        self.tool_servers.clear()
        for name in names:
            item = QListWidgetItem(name)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if name in chosen else Qt.Unchecked)
            self.tool_servers.addItem(item)
        self.tool_servers.setVisible(bool(names))
        self.no_tool_servers.setVisible(not names)
        self._update_tools_enabled()

    def chosen_tool_servers(self) -> list[str]:
        return [self.tool_servers.item(i).text() for i in range(self.tool_servers.count())
                if self.tool_servers.item(i).checkState() == Qt.Checked]

    def _update_tools_enabled(self) -> None:
        idle = not self.server.running and not self.changing
        self.offer_tools.setEnabled(idle)
        self.tool_servers.setEnabled(idle and self.offer_tools.isChecked())
        self.tools_in_chat.setEnabled(idle and self.offer_tools.isChecked())

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self.server.running and not self.changing:
            self.refresh_tool_servers()  # servers added on the Tools page since

    def serve_options(self) -> ServeOptions:
        return ServeOptions(host=self.host.text().strip() or ServeOptions.host, port=self.port.value(),
                            api_key=self.api_key.text().strip() or None, cors=self.cors.text().split(),
                            tools=self.chosen_tool_servers() if self.offer_tools.isChecked() else [],
                            tools_in_chat=self.offer_tools.isChecked() and self.tools_in_chat.isChecked())

    def _model(self) -> str:
        return model_id(self.backend.info) or "MODEL"

    def update_snippets(self, *_args) -> None:
        s = self.serve_options()
        url = self.server.url or base_url("127.0.0.1" if s.host in ("0.0.0.0", "::") else s.host, s.port)
        self.curl.setPlainText(curl_snippet(url, s.api_key, self._model()))
        self.python.setPlainText(python_snippet(url, s.api_key, self._model()))

    # --- start / stop --------------------------------------------------------------
    def start(self) -> None:
        if self.changing or self.server.running:
            return
        options = self.serve_options()
        self.status.ok("Starting the MCP servers offered, then the API…" if options.tools else "Starting…")
        self._change("start", lambda: self.server.start(options), lambda url: self._started(options, url))

    def stop(self) -> None:
        if self.changing or not self.server.running:
            return
        self.status.ok("Stopping: the requests in flight finish first…")
        self._change("stop", self.server.stop, lambda _none: self.status.ok("Stopped."))

    def _change(self, what: str, work, done) -> None:
        """A start or a stop on a thread; the page's controls wait for it, the window does not."""
        self.changing = what
        self._update_state()

        def ended(say):
            def after(value) -> None:
                self.changing = ""
                say(value)
                self._update_state()
                self.serving_changed.emit(self.server.running)
            return after

        self.tasks.run(work, ended(done), ended(self._refused), f"server-{what}")

    def _refused(self, message: str) -> None:
        self.status.error(message)
        self.noticed.emit(Notice(message, ERROR, "server"))

    def close_tasks(self) -> None:
        """The window closes: a start in progress is waited for, and the server stopped (here, on the GUI thread:
        the window is going)."""
        self.tasks.close()
        if self.server.running:
            self.server.stop()

    def _started(self, options: ServeOptions, url: str) -> None:
        model = model_id(self.backend.info)
        said = (f"Serving {model} at {url}." if model else
                f"Serving at {url}; requests get 503 until a model is loaded on this computer.")
        if options.tools:
            where = "Responses and chat completions" if options.tools_in_chat else "Responses"
            said += (f" API clients may use the MCP servers {', '.join(options.tools)} in {where} (only tools "
                     "allowed Always run).")
        self._keep(options)
        notice = self.keys.save(KEY_ACCOUNT, options.api_key) if options.api_key else None
        self.status.ok(f"{said} {notice}" if notice else said)
        self.noticed.emit(cleared("server"))  # an earlier refused start is answered

    def _keep(self, options: ServeOptions) -> None:
        """What worked is what the next session starts with (the key itself goes to the keyring)."""
        self.settings[SETTINGS_KEY] = {"host": options.host, "port": options.port, "cors": options.cors,
                                       "offer_tools": self.offer_tools.isChecked(),
                                       "tools_in_chat": self.tools_in_chat.isChecked(),
                                       "tools": self.chosen_tool_servers()}

    def _update_state(self) -> None:
        running, changing = self.server.running, bool(self.changing)
        for widget in (self.host, self.port, self.api_key, self.new_key_button, self.cors, self.start_button):
            widget.setEnabled(not running and not changing)
        self.stop_button.setEnabled(running and not changing)
        self.start_button.setText("Starting…" if self.changing == "start" else "Start server")
        self.stop_button.setText("Stopping…" if self.changing == "stop" else "Stop")
        self._update_tools_enabled()
        self.update_snippets()

    # --- request log -----------------------------------------------------------------
    def _on_request_logged(self, record: RequestRecord) -> None:
        if self.log.rowCount() >= MAX_LOG_ROWS:
            self.log.removeRow(0)
        row = self.log.rowCount()
        self.log.insertRow(row)
        values = (time.strftime("%H:%M:%S", time.localtime(record.started)), f"{record.method} {record.path}",
                  str(record.status), tokens_text(record), f"{record.duration_s * 1000:.0f} ms")
        for col, value in enumerate(values):
            self.log.setItem(row, col, QTableWidgetItem(value))
        self.log.scrollToBottom()
