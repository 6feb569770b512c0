"""The Tools page: the MCP servers whose tools the model may call (mcp.json, app/tools/servers.py), adding one
(a program with its arguments and environment, or an address with its headers), importing another app's
mcp.json, removing one, and testing one: it is started and its tools are listed with their schemas.

Which servers a chat uses is chosen on the chat page (its Tools box); every call still asks the user. Secrets
in a new server's environment or headers go to the keyring (app/tools/server_secrets.py). Starting a server
takes seconds, so the test runs on a worker thread.
"""

from __future__ import annotations

import html
import json
import shlex
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QFileDialog, QFormLayout, QGroupBox, QHeaderView, QLineEdit, QPlainTextEdit,
                               QRadioButton, QSplitter, QTableWidgetItem, QTextBrowser, QWidget)

from app.ui.widgets.notices import ERROR, Notice, cleared
from app.core import paths
from app.core.errors import HearthError
from app.ui.chat.model_picker import tools_badge
from app.ui.bridge.worker import Tasks
from app.ui.widgets import STRETCH, button, chosen_row_text, hbox, picking_table, vbox, wrapped

RUNS_AS_YOU = ("Tools run as you, with your permissions: a server can read, change and send what you can. Add only "
               "servers you trust; Hearth asks before each call unless you allow a tool for good.")


def _pairs(text: str, sep: str, what: str) -> dict[str, str]:
    """NAME=VALUE (or 'Name: value') lines as a dict; one sentence for a line that is neither."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, found, value = line.partition(sep)
        if not found or not key.strip():
            raise HearthError(f"{what}, line {number}: '{line.strip()}' must look like NAME{sep}VALUE.")
        out[key.strip()] = value.strip()
    return out


def tools_text(conn) -> str:
    """A tested server's tools with their schemas, as HTML for the details pane."""
    head = (f"<p><b>{html.escape(conn.entry.name)}</b> ({html.escape(conn.server_name or conn.entry.describe())}) "
            f"has {len(conn.tools)} tool{'s' if len(conn.tools) != 1 else ''}:</p>")
    # Each schema wrapped, not <pre>: a long description widened the pane into sideways scrolling.
    return head + "".join(f"<p><b>{html.escape(tool.name)}</b>: {html.escape(tool.description.strip())}</p>"
                          "<p style='font-family:monospace; white-space:pre-wrap'>"
                          f"{html.escape(json.dumps(tool.schema, ensure_ascii=False, indent=2))}</p>"
                          for tool in conn.tools)


class ToolsPage(QWidget):
    noticed = Signal(object)  # a Notice (app.ui.widgets.notices) for the window's status bar
    servers_changed = Signal()
    server_dropped = Signal(str)  # removed or replaced: a running copy of it must end
    tested = Signal(str)  # the server's name, once its tools are listed (or its test failed)

    def __init__(self, bridge=None, parent=None):
        """bridge: the window's EngineBridge, whose news the page follows itself (the loaded model's tools badge;
        a server removed or replaced ends its running copy); none in tests that feed it."""
        super().__init__(parent)
        self.bridge = bridge
        self.tasks = Tasks(self)
        self._testing = False  # a server is being started and asked for its tools
        intro = wrapped("MCP servers whose tools the model may call: the time, your files, git, a database. Choose "
                        "them per chat in the chat page's Tools box; each call is shown and runs only after you "
                        f"allow it. They are kept in {paths.mcp_config_file()}, the mcpServers file LM Studio, Jan, "
                        "Claude Desktop and Cursor use, so one you have there can be imported.")
        self.model_line = wrapped(name="toolsModel")
        self.table = picking_table(["Server", "Kind", "Program or address", "Always allowed"], "MCP servers")
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.Stretch)
        self.test_button = button("Test", self.test_selected, "Start the server and list its tools with their schemas")
        self.remove_button = button("Remove", self.remove_selected,
                                    "Remove the server from mcp.json, with the tools allowed for it and its "
                                    "secrets in the keyring")
        self.import_button = button("Import mcp.json…", lambda: self.import_file(),
                                    "Add every server of another app's mcp.json (or claude_desktop_config.json)")
        self.status = wrapped()
        self.details = QTextBrowser()
        self.details.setAccessibleName("The server's tools")
        self.details.setPlaceholderText("Test a server to see its tools and their schemas here.")

        # The add form: a program (stdio) or an address (streamable HTTP).
        self.name_edit = QLineEdit(placeholderText="time")
        self.stdio_choice = QRadioButton("A program (stdio)")
        self.http_choice = QRadioButton("An address (HTTP)")
        self.stdio_choice.setChecked(True)
        self.command_edit = QLineEdit(placeholderText="uvx mcp-server-time --local-timezone Europe/Paris")
        self.command_edit.setToolTip("The program and its arguments, as in a shell (quotes group an argument)")
        self.env_edit = QPlainTextEdit()
        self.env_edit.setTabChangesFocus(True)  # Tab moves on, as in the rest of the form
        self.env_edit.setPlaceholderText("NAME=VALUE, one a line (API keys and tokens go to the keyring)")
        self.env_edit.setFixedHeight(48)
        self.url_edit = QLineEdit(placeholderText="https://example.com/mcp")
        self.headers_edit = QPlainTextEdit()
        self.headers_edit.setTabChangesFocus(True)  # Tab moves on, as in the rest of the form
        self.headers_edit.setPlaceholderText("Name: value, one a line (Authorization goes to the keyring)")
        self.headers_edit.setFixedHeight(48)
        self.add_button = button("Add server", self.add_server)
        self.runs_as_you = wrapped(RUNS_AS_YOU, "toolsWarning", "#b45309")
        form_box = QGroupBox("Add a server")
        form = self._form = QFormLayout(form_box)
        form.addRow("Name", self.name_edit)
        form.addRow("Kind", hbox(self.stdio_choice, self.http_choice, STRETCH))
        form.addRow("Command", self.command_edit)
        form.addRow("Environment", self.env_edit)
        form.addRow("Address", self.url_edit)
        form.addRow("Headers", self.headers_edit)
        form.addRow(self.runs_as_you)
        form.addRow(hbox(STRETCH, self.add_button))

        left = QWidget()
        vbox((self.table, 1), hbox(self.test_button, self.remove_button, self.import_button, STRETCH), form_box,
             parent=left, margin=0)
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(self.details)
        splitter.setSizes([560, 440])
        vbox(intro, self.model_line, (splitter, 1), self.status, parent=self)

        self.stdio_choice.toggled.connect(self._show_kind)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self._show_kind()
        self.show_model(None)
        self.refresh()
        if bridge is not None:
            bridge.model_loaded.connect(self.show_model)
            for signal in (bridge.model_unloaded, bridge.backend_changed):
                signal.connect(self._show_loaded_model)
            self.server_dropped.connect(bridge.tools.drop_server)
            self._show_loaded_model()

    def _show_loaded_model(self, *_args) -> None:
        self.show_model(self.bridge.info if self.bridge.ready else None)

    # --- what is shown ----------------------------------------------------------
    def show_model(self, info: dict | None) -> None:
        """Whether the loaded model was trained for tools, as the model picker's badge says it."""
        text, tip = tools_badge(info)
        if not text:
            text = ("No model is loaded: whether it was trained for tools shows here once one is." if not info else
                    "The server's model: whether it was trained for tools is the server's to know.")
        else:
            text = f"The loaded model: {text.lower()}. {tip}."
        self.model_line.setText(text)

    def refresh(self) -> None:
        from app.tools.servers import allowed_tools, load_servers

        try:
            servers = load_servers()
        except HearthError as exc:
            servers = {}
            self.status.setText(str(exc))
        chosen = self.selected()
        self.table.setRowCount(len(servers))
        for row, (name, entry) in enumerate(servers.items()):
            kind = "program" if entry.command else "address"
            cells = [name, kind + (" (disabled)" if entry.disabled else ""), entry.describe(),
                     ", ".join(sorted(allowed_tools(name))) or "none"]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(row, column, item)
            if name == chosen:
                self.table.selectRow(row)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.Stretch)
        self._update_buttons()

    def selected(self) -> str | None:
        return chosen_row_text(self.table)

    def select(self, name: str) -> None:
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).text() == name:
                self.table.selectRow(row)

    def _update_buttons(self) -> None:
        chosen = self.selected() is not None
        self.test_button.setEnabled(chosen and not self._testing)
        self.remove_button.setEnabled(chosen)

    def _show_kind(self) -> None:
        """Only the kind chosen shows its fields: disabled, the other kind's looked like fields to fill (#55 F)."""
        stdio = self.stdio_choice.isChecked()
        for widget in (self.command_edit, self.env_edit):
            widget.setEnabled(stdio)
            self._form.setRowVisible(widget, stdio)
        for widget in (self.url_edit, self.headers_edit):
            widget.setEnabled(not stdio)
            self._form.setRowVisible(widget, not stdio)

    # --- changes --------------------------------------------------------------
    def entry_from_form(self):
        from app.tools.servers import ServerEntry, parse_entry

        name = self.name_edit.text().strip()
        if self.stdio_choice.isChecked():
            try:
                words = shlex.split(self.command_edit.text())
            except ValueError as exc:
                raise HearthError(f"The command cannot be read ({exc}); close its quotes.") from None
            if not words:
                raise HearthError("Give the program to start (and its arguments), e.g. uvx mcp-server-time.")
            entry = ServerEntry(name, command=words[0], args=words[1:],
                                env=_pairs(self.env_edit.toPlainText(), "=", "Environment"))
        else:
            entry = ServerEntry(name, url=self.url_edit.text().strip(),
                                headers=_pairs(self.headers_edit.toPlainText(), ":", "Headers"))
        parse_entry(name, entry.to_json(), "The form")  # the same checks as an mcp.json entry
        return entry

    def add_server(self) -> bool:
        """The form's server into mcp.json (its secrets into the keyring); False, with the sentence, if not."""
        from app.tools.server_secrets import keep_secrets
        from app.tools.servers import save_server

        try:
            entry, notes = keep_secrets(self.entry_from_form())
            save_server(entry)
        except HearthError as exc:
            self.status.setText(str(exc))
            self.noticed.emit(Notice(str(exc), ERROR, "tools"))
            return False
        import shutil

        said = f"Added {entry.name} ({entry.describe()}). Test it, then turn it on for a chat in its Tools box."
        if entry.command and shutil.which(entry.command) is None:
            said += f" Note: there is no program '{entry.command}' on PATH yet; it cannot start until there is."
        self.status.setText(" ".join([said, *notes]))
        self.noticed.emit(cleared("tools"))  # an earlier refusal is answered
        for edit in (self.name_edit, self.command_edit, self.env_edit, self.url_edit, self.headers_edit):
            edit.clear()
        self.refresh()
        self.select(entry.name)
        self.servers_changed.emit()
        return True

    def remove_selected(self) -> None:
        from app.tools.servers import remove_server

        name = self.selected()
        if name is None:
            return
        try:
            remove_server(name)
        except HearthError as exc:
            self.status.setText(str(exc))
            return
        self.server_dropped.emit(name)
        self.status.setText(f"Removed {name}, with the tools always allowed for it.")
        self.details.clear()
        self.refresh()
        self.servers_changed.emit()

    def import_file(self, path: str | None = None) -> list[str]:
        from app.tools.servers import import_servers

        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, "Import an mcp.json", str(Path.home()),
                                                  "MCP server files (*.json);;All files (*)")
            if not path:
                return []
        try:
            names = import_servers(Path(path))
        except HearthError as exc:
            self.status.setText(str(exc))
            return []
        self.status.setText(f"Added {', '.join(names)} from {Path(path).name}. {RUNS_AS_YOU}")
        self.refresh()
        self.servers_changed.emit()
        return names

    def test_selected(self) -> None:
        """Start the chosen server on a worker thread and list its tools."""
        from app.tools.mcp_client import McpConnection
        from app.tools.servers import get_server

        name = self.selected()
        if name is None or self._testing:
            return
        self._testing = True

        def test():
            with McpConnection(get_server(name)) as conn:
                return tools_text(conn)

        def shown(text: str) -> None:
            self._testing = False
            self.details.setHtml(text)
            self.status.setText(f"{name} answered.")
            self._update_buttons()
            self.tested.emit(name)

        def failed(message: str) -> None:
            self._testing = False
            self.details.setPlainText(message)
            self.status.setText(message)
            self._update_buttons()
            self.tested.emit(name)

        self.status.setText(f"Starting {name}…")
        self.tasks.run(test, shown, failed, name="mcp-test")
        self._update_buttons()

    def close_tasks(self) -> None:
        self.tasks.close()
