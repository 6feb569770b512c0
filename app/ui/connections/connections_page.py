"""The Connections page: add a server (its OpenAI base URL and API key), test it, list its models and
chat with one of them as with a local model.

The window's chat, regenerate/edit, stop, transcript and monitor all go through EngineBridge, so
choosing a remote model only swaps the bridge's backend for a RemoteEndpoint (app.backends.remote);
"Use this computer" swaps the local engine back, whose model stayed loaded. Testing a server asks it
for /v1/models on a Tasks thread, so a slow or unreachable host never freezes the window; its
errors are RemoteEndpoint's one-sentence messages (unreachable, TLS, 401, not an OpenAI server).
"""

from __future__ import annotations

import time
from contextlib import closing

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QFormLayout, QGroupBox, QHeaderView, QLabel, QLineEdit, QListWidget,
                               QListWidgetItem, QSplitter, QTreeWidget, QTreeWidgetItem, QWidget)

from app.ui.widgets.notices import ERROR, Notice, cleared
from app.core.api_keys import KeyStore
from app.core.errors import HearthError
from app.protocol.messages import LoadOptions
from app.backends.remote import RemoteEndpoint, api_base
from app.ui.connections.saved import forget_connection, remember_connection, saved_connections
from app.ui.connections.server_figures import ServerFigures
from app.ui.bridge.engine_bridge import EngineBridge
from app.ui.models.titles import model_title
from app.ui.widgets import STRETCH, StatusLine, button, group, hbox, vbox, wrapped
from app.ui.bridge.worker import Tasks

URL_HINT = "http://127.0.0.1:8080/v1"
MODEL_COLUMNS = ["Model", "Context", "Owned by", ""]
HELP = ("Any OpenAI-compatible server works: llama.cpp's llama-server (also with --rpc workers), vLLM, "
        "Ollama (http://HOST:11434/v1), LM Studio (http://HOST:1234/v1), Jan, or another Hearth "
        "(hearth serve). Give its base URL, which usually ends in /v1. Keys are kept in the system keyring.")


def list_server_models(url: str, api_key: str | None) -> list[dict]:
    """GET {url}/models; raises the HearthError sentence of a failed check (runs on a Tasks thread)."""
    with closing(RemoteEndpoint(url, api_key)) as endpoint:
        return endpoint.models()


class ConnectionsPage(QWidget):
    noticed = Signal(object)  # a Notice (app.ui.widgets.notices) for the window's status bar
    models_listed = Signal(list)  # model ids, after a test that worked

    def __init__(self, bridge: EngineBridge, settings: dict, keys: KeyStore | None = None, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.settings = settings
        self.title = model_title  # what the window calls a model; the main window gives the library's titles
        self.keys = keys or KeyStore()
        self.tasks = Tasks(self)
        self.figures = ServerFigures(bridge, self)
        self._tested_url: str | None = None  # the server whose models the list shows

        self.saved = QListWidget()
        self.saved.setAccessibleName("Saved servers")
        self.saved.setToolTip("Servers you connected to; the keys are in the system keyring")
        self.new_button = button("New", self.new_server)
        self.remove_button = button("Remove", self.remove_server, "Forget this server and its stored key")

        self.url = QLineEdit(placeholderText=URL_HINT)
        self.url.setAccessibleName("Server address")
        self.api_key = QLineEdit(placeholderText="none")
        self.api_key.setAccessibleName("API key")
        self.api_key.setEchoMode(QLineEdit.Password)
        self.show_key = QCheckBox("Show")
        self.remember_key = QCheckBox("Remember the key in the system keyring")
        self.remember_key.setChecked(True)
        self.test_button = button("Test and list models", self.test)
        self.test_button.setDefault(True)
        self.status = StatusLine()

        self.models = QTreeWidget()
        self.models.setAccessibleName("The server's models")
        self.models.setHeaderLabels(MODEL_COLUMNS)
        self.models.setRootIsDecorated(False)
        self.models.header().setSectionResizeMode(0, QHeaderView.Stretch)
        self.models.header().setStretchLastSection(False)
        self.use_button = button("Chat with this model", self.use_selected)
        self.local_button = button("Use this computer's model", self.use_local,
                                   "Chat with the model loaded on this computer again")
        self.current = wrapped(name="connectionCurrent")
        help_label = wrapped(HELP, "connectionsHelp")

        self._lay_out(help_label)
        self.saved.currentItemChanged.connect(self._on_saved_chosen)
        self.show_key.toggled.connect(lambda on: self.api_key.setEchoMode(QLineEdit.Normal if on else QLineEdit.Password))
        self.url.returnPressed.connect(self.test)
        self.url.textEdited.connect(self._on_address_edited)
        self.api_key.textEdited.connect(self._on_address_edited)
        self.models.itemDoubleClicked.connect(lambda *_: self.use_selected())
        self.models.currentItemChanged.connect(lambda *_: self._update_buttons())
        bridge.model_loaded.connect(self._on_model_loaded)
        bridge.load_failed.connect(self._on_load_failed)
        bridge.backend_changed.connect(lambda _b: self._show_current())
        self._fill_saved()
        self._show_current()
        self._update_buttons()

    def _lay_out(self, help_label: QLabel) -> None:
        side = group("Servers", (self.saved, 1), hbox(self.new_button, self.remove_button))

        server = QGroupBox("Server")
        form = QFormLayout(server)
        form.addRow("OpenAI base URL", self.url)
        form.addRow("API key", hbox((self.api_key, 1), self.show_key))
        form.addRow("", self.remember_key)
        form.addRow("", hbox(self.test_button, STRETCH))
        form.addRow("", self.status)

        models = group("Models on this server", (self.models, 1),
                       hbox(self.use_button, STRETCH, self.local_button), self.current)

        main = QWidget()
        vbox(server, (models, 1), help_label, parent=main, margin=0)
        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(side)
        splitter.addWidget(main)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([240, 760])
        hbox(splitter, parent=self, margin=6)

    # --- saved servers -----------------------------------------------------
    def _fill_saved(self, select: str | None = None) -> None:
        self.saved.blockSignals(True)
        self.saved.clear()
        for entry in saved_connections(self.settings):
            item = QListWidgetItem(entry["url"])
            item.setData(Qt.UserRole, entry)
            self.saved.addItem(item)
            if entry["url"] == select:
                self.saved.setCurrentItem(item)
        self.saved.blockSignals(False)

    def _on_saved_chosen(self, item: QListWidgetItem | None, _previous=None) -> None:
        if item is None:
            return
        entry = item.data(Qt.UserRole)
        self.url.setText(entry["url"])
        self.api_key.setText(self.keys.get(entry["url"]) or "")
        self._forget_models()
        self.status.ok("")

    def new_server(self) -> None:
        self.saved.clearSelection()
        self.saved.setCurrentItem(None)
        self.url.clear()
        self.api_key.clear()
        self._forget_models()
        self.status.ok("")
        self.url.setFocus()

    def remove_server(self) -> None:
        item = self.saved.currentItem()
        if item is None:
            return
        url = item.data(Qt.UserRole)["url"]
        forget_connection(self.settings, url)
        self.keys.forget(url)
        self._fill_saved()
        self.new_server()

    # --- testing a server ------------------------------------------------------
    def _address(self) -> tuple[str, str | None] | None:
        """The form's URL (in RemoteEndpoint's spelling) and key; None after showing why the URL is wrong."""
        try:
            url = api_base(self.url.text() or URL_HINT)
        except HearthError as exc:
            self._fail(str(exc))
            return None
        return url, self.api_key.text().strip() or None

    def test(self) -> None:
        address = self._address()
        if address is None or self.tasks.busy():
            return
        url, key = address
        self.test_button.setEnabled(False)
        self.status.ok(f"Asking {url}/models…")
        started = time.monotonic()
        self.tasks.run(lambda: list_server_models(url, key),
                       lambda models: self._on_listed(url, key, models, time.monotonic() - started),
                       self._on_test_failed, "connection-test")

    def _on_listed(self, url: str, key: str | None, models: list[dict], seconds: float) -> None:
        self.test_button.setEnabled(True)
        self._tested_url = url
        self.models.clear()
        remembered = next((e["model"] for e in saved_connections(self.settings) if e["url"] == url), None)
        for entry in models:
            # What the list says about a model differs by server: llama-server and Hearth send "meta",
            # vLLM "max_model_len"; a blank cell is a figure the server does not tell.
            meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
            n_ctx = meta.get("n_ctx") or entry.get("max_model_len") or ""
            item = QTreeWidgetItem([entry["id"], str(n_ctx), str(entry.get("owned_by") or ""), ""])
            item.setToolTip(0, entry["id"])
            self.models.addTopLevelItem(item)
            if entry["id"] == remembered or self.models.currentItem() is None:
                self.models.setCurrentItem(item)
        for col in range(1, len(MODEL_COLUMNS) - 1):
            self.models.resizeColumnToContents(col)
        self._mark_in_use()
        count = f"{len(models)} model{'s' if len(models) != 1 else ''}"
        said = f"Connected to {url} in {seconds:.2f} s: {count}."
        remember_connection(self.settings, url)
        if key and not self.remember_key.isChecked():
            self.keys.keep_for_session(url, key)
        elif key:
            notice = self.keys.save(url, key)
            said += f" {notice}" if notice else " The key is in the system keyring."
        self._fill_saved(select=url)
        self.status.ok(said)
        self.noticed.emit(cleared("connections"))  # an earlier failed test is answered
        self._update_buttons()
        self.models_listed.emit([e["id"] for e in models])

    def _on_test_failed(self, message: str) -> None:
        self.test_button.setEnabled(True)
        self._forget_models()
        self._fail(message)

    def _fail(self, message: str) -> None:
        self.status.error(message)
        self.noticed.emit(Notice(message, ERROR, "connections"))

    def _on_address_edited(self, _text: str) -> None:
        """The listed models belong to the server as tested: an edited address or key must be tested again."""
        if self._tested_url is not None:
            self._forget_models()

    def _forget_models(self) -> None:
        self._tested_url = None
        self.models.clear()
        self._update_buttons()

    # --- choosing a model --------------------------------------------------------
    def use_selected(self) -> None:
        item = self.models.currentItem()
        if item is None or self._tested_url is None:
            return
        url, key, model = self._tested_url, self.api_key.text().strip() or None, item.text(0)
        remember_connection(self.settings, url, model)
        self.bridge.use_backend(RemoteEndpoint(url, key, model))
        self.bridge.load(LoadOptions())  # a remote "load" checks the server and picks the model
        self.status.ok(f"Connecting to {model} on {url}…")

    def use_local(self) -> None:
        self.bridge.use_local()
        if not self.bridge.ready and not self.bridge.loading:
            self.status.ok("No model is loaded on this computer; choose one under Models.")

    def _on_model_loaded(self, info: dict) -> None:
        if info.get("remote"):
            self.status.ok(f"Chatting with {model_title(info)} on {info['endpoint']}: "
                           "the Chat page sends your messages there.")
        self._show_current()

    def _on_load_failed(self, message: str) -> None:
        if self.bridge.remote:
            self.status.error(message)
        self._show_current()

    def _show_current(self) -> None:
        info = self.bridge.info
        if self.bridge.remote:
            where = self.bridge.backend.base_url
            self.current.setText(f"The window chats with {self.title(info)} on {where}." if info else
                                 f"The window is connecting to {where}.")
        else:
            self.current.setText(f"The window chats with {self.title(info)} on this computer." if info else
                                 "The window chats with this computer's model (none is loaded).")
        self._mark_in_use()
        self._update_buttons()

    def _mark_in_use(self) -> None:
        backend = self.bridge.backend if self.bridge.remote else None
        model = self.bridge.info.get("model") if backend is not None and self.bridge.info else None
        for i in range(self.models.topLevelItemCount()):
            item = self.models.topLevelItem(i)
            in_use = backend is not None and backend.base_url == self._tested_url and item.text(0) == model
            item.setText(3, "in use" if in_use else "")
        self.models.resizeColumnToContents(3)

    def _update_buttons(self) -> None:
        self.use_button.setEnabled(self.models.currentItem() is not None and self._tested_url is not None)
        self.local_button.setEnabled(self.bridge.remote)
        self.remove_button.setEnabled(self.saved.currentItem() is not None)

    def close_tasks(self) -> None:
        self.figures.close()
        self.tasks.join()
