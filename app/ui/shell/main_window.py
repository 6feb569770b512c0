"""Hearth's main window: chat and models as pages, live monitor beside them, a status bar.

The window paints before its heavier parts exist (pyqtgraph, httpx, the API server, the key ring: about a
second of imports and building on a 2-core machine). After the first paint come the library's reading and
the live monitor; the Benchmark, Connections and Server pages follow once the first model has loaded (the
load the user waits for goes first), or when their tab is opened or something asks for one sooner.

The status bar is a NoticeBar (app/ui/shell/notice_bar.py: every sentence is a notice of one model, app/ui/widgets/notices.py)
with the lasting state beside it (app/ui/shell/status_labels.py, which follows the bridge itself). Pages say what the
user should read by emitting `noticed` with a Notice; show_message is the same path for the window's own words.

Each page follows the bridge's news itself (the monitor, Benchmark, Tools, Server, Documents and the status
labels are given the bridge); the window only builds them and joins what passes between pages.
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path

from PySide6.QtCore import QByteArray, QCoreApplication, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import QDockWidget, QFileDialog, QMainWindow, QMessageBox, QTabWidget, QWidget

from app import __version__
from app.core.library.bundled import bundled_model_path
from app.ui.chat.chat_export import file_name, import_chat, write_export
from app.core.chats.store import ChatStore
from app.core.errors import HearthError
from app.core.store import jsonstore
from app.ui.settings import shape
from app.ui.settings.store import changed_keys, load_settings, problems, save_settings
from app.ui.widgets.notices import ERROR, INFO, WARNING, Notice
from app.protocol.messages import LoadOptions, SamplingOptions
from app.backends.supervisor import Supervisor
from app.ui.chat.chat_view import ChatView
from app.ui.shell.deferred_pages import DeferredPages
from app.ui.bridge.engine_bridge import EngineBridge
from app.ui.shell.load_notices import CAUSE as LOAD_CAUSE, load_notices
from app.ui.shell.first_paint import after_first_paint
from app.ui.models.models_view import ModelsView
from app.ui.models.titles import model_title
from app.ui.shell.notice_bar import NoticeBar
from app.ui.shell.notify import Notifier
from app.ui.shell import theme
from app.ui.shell import window_mode
from app.ui.settings.settings_dialog import SettingsDialog, default_load_options
from app.ui.shell.status_labels import StatusLabels
from app.ui.widgets import VerticalScroll, button, hbox, vbox, wrapped

DEFAULT_SIZE = (1280, 800)
# The smallest screen Hearth is made for (a netbook's 1024x600): the first size fills at most the screen's free area.
SMALLEST_SCREEN = (1024, 600)
# The window's minimum width is what its layout needs (the chat page beside the monitor), which Qt enforces
# itself: a minimum set here (900) under a layout that needed 1004 pixels let the pages be cut. The pages get a
# floor for their height, so that the transcript and the load settings keep a usable height; with the menu, the
# tabs and the status bar it must stay under a 600-pixel screen's free height (500 made the window 599 at least).
PAGE_MIN_HEIGHT = 380
MONITOR_MIN_WIDTH = 240  # narrower, its graphs are unreadable (a dock once shrunk to ~75 px stayed so)
MONITOR_WIDTH = 300
COPIED_MS = 2000  # how long "Copied" stays in the status bar
# The longest a write on the GUI thread waits for another program's lock on the chat history: a hitch, never a
# freeze (SQLite's own writers hold it for milliseconds; a backup tool or a second window may hold it for seconds).
GUI_LOCK_WAIT_S = 0.05
QUIT_SAVE_WAIT_S = 3.0  # how long a closing window waits for an answer the chat history could not take yet
# Built after the first load (the monitor is built after the first paint: it is on screen).
DEFERRED_TABS = {"documents": "Documents", "tools": "Tools", "bench": "Benchmark", "connections": "Connections",
                 "server": "Server"}


def default_size(available_width: int, available_height: int) -> tuple[int, int]:
    """The first start's size: 1280x800 where it fits, else the screen's free area less a margin, and never more
    than that area (1280x800 was taller than a 768-pixel screen, and 1024x700 than a 600-pixel one: the status
    bar and Send fell off)."""
    def side(default: int, smallest: int, free: int) -> int:
        return min(default, max(free - 24, min(smallest, free)))

    return (side(DEFAULT_SIZE[0], SMALLEST_SCREEN[0], available_width),
            side(DEFAULT_SIZE[1], SMALLEST_SCREEN[1], available_height))


class MainWindow(QMainWindow):
    closed = Signal()
    store_noticed = Signal(str)  # a store's notice (a damaged file kept aside), from any thread

    def __init__(self, load_on_start: bool = True, engine: Supervisor | None = None):
        """engine: a local engine already started (app.ui.shell.app starts it before the window is built)."""
        super().__init__()
        self.setWindowTitle("Hearth")
        self.settings = load_settings()
        # What the file held when last read or written: a save writes only what differs from it, so that this
        # window does not write its start-up copy over what another process changed since.
        self._settings_saved = json.loads(json.dumps(self.settings))
        self.settings_problems = problems()  # said once the status bar exists
        self.store = ChatStore()
        # The window's writes run on the GUI thread: they never wait long for another program's lock (an answer's
        # end that cannot be saved at once is saved later, app/core/chats/answer_saving.py).
        self.store.wait_for_locks(GUI_LOCK_WAIT_S)
        self.bridge = EngineBridge(self, engine)
        self._dark = False  # the theme, for the pages built later
        self._closed = False

        self.chat = ChatView(self.bridge, self.store)
        self.models = ModelsView(self.bridge, self.settings)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.chat, "Chat")
        self.tabs.addTab(self.models, "Models")
        self.pages = DeferredPages(self.tabs)
        for name, title in DEFERRED_TABS.items():
            self.pages.add(name, getattr(self, f"_build_{name}"), title)
        self.pages.add("monitor", self._build_monitor)
        self.setCentralWidget(self.tabs)
        self.monitor_dock = QDockWidget("Live monitor", self)
        self.monitor_dock.setObjectName("monitorDock")
        monitor_space = QWidget()  # the monitor's room until it is built
        monitor_space.setMinimumWidth(MONITOR_MIN_WIDTH)
        self.monitor_dock.setWidget(monitor_space)
        self.monitor_dock.setFeatures(QDockWidget.DockWidgetClosable | QDockWidget.DockWidgetMovable)
        self.addDockWidget(Qt.RightDockWidgetArea, self.monitor_dock)
        self.resizeDocks([self.monitor_dock], [MONITOR_WIDTH], Qt.Horizontal)
        self.tabs.setMinimumHeight(PAGE_MIN_HEIGHT)

        self.notifier = Notifier(self)
        self._build_status_bar()
        self._build_menus()
        self._connect()
        self._build_mode_offer()  # before the geometry is restored: it changes what the window holds
        self._restore()
        self.set_mode(window_mode.chosen(self.settings), save=False)
        from PySide6.QtWidgets import QApplication

        if theme.chosen:  # the Settings dialog's theme, over the system's that make_app applied
            theme.apply_theme(QApplication.instance())
        else:
            self.apply_theme(bool(QApplication.instance().property("hearth_dark")))
        if self.settings_problems:
            self.show_message("Some settings were reset: " + "; ".join(self.settings_problems) + ".", WARNING,
                              "settings")
        if self.store.notice:  # a damaged chat history was moved aside (and what could be read recovered)
            self.show_message(self.store.notice, WARNING, "chats.store")
        # A damaged JSON store (settings, library, presets...) kept aside: said once, now and whenever found.
        self.store_noticed.connect(lambda text: self.show_message(text, WARNING), Qt.QueuedConnection)
        self._store_listener = self.store_noticed.emit
        jsonstore.add_listener(self._store_listener)
        if load_on_start:
            self.load_start_model()
        after_first_paint(self, [self._unless_closed(self.models.start), self._unless_closed(lambda: self.monitor)])
        self.bridge.model_loaded.connect(self._build_tabs_later, Qt.SingleShotConnection)

    # --- the pages built after the first paint ----------------------------------
    def _unless_closed(self, build):
        return lambda: self._closed or build()

    def _build_tabs_later(self, *_args) -> None:
        """The tabs' pages, one per turn of the event loop, so news and input in between wait for one at most."""
        for name in DEFERRED_TABS:
            QTimer.singleShot(0, self, self._unless_closed(lambda name=name: self.pages.get(name)))

    # Asking for a page that was not built yet builds it now.
    monitor = property(lambda self: self.pages.get("monitor"))
    bench = property(lambda self: self.pages.get("bench"))
    connections = property(lambda self: self.pages.get("connections"))
    server = property(lambda self: self.pages.get("server"))
    documents = property(lambda self: self.pages.get("documents"))
    tools = property(lambda self: self.pages.get("tools"))

    def _build_monitor(self):
        from app.ui.monitor.monitor_view import MonitorView

        monitor = MonitorView(self.bridge)  # it follows the bridge's news itself
        # Its graphs scroll where the window is short (#55 C: with a model loaded they asked for 542 px, and the
        # full window's minimum became 604, past a 1024x600 screen less its panel).
        column = VerticalScroll(monitor, name="Live monitor graphs", flat=True)  # the graphs narrow with the dock instead
        column.setMinimumWidth(MONITOR_MIN_WIDTH)
        self.monitor_dock.setWidget(column)
        monitor.apply_theme(self._dark)
        return monitor

    def _build_bench(self):
        from app.ui.bench.bench_view import BenchView

        bench = BenchView(self.bridge, self.models.title)  # it follows the loaded model itself
        bench.apply_theme(self._dark)
        bench.noticed.connect(self.notices.board.post)
        bench.jobs.job_finished.connect(lambda *_: self.models.refresh())  # its quantized copies
        bench.jobs.job_finished.connect(
            lambda _kind, result: result is not None and self.notifier.job_ended(
                "Benchmark finished", "Hearth's benchmark is done; its table is on the Benchmark page."))
        bench.jobs.job_failed.connect(lambda message: self.notifier.job_ended("Benchmark failed", message))
        return bench

    def _build_connections(self):
        from app.ui.connections.connections_page import ConnectionsPage

        connections = ConnectionsPage(self.bridge, self.settings)
        connections.title = self.models.title  # one name for a model on every page
        connections.noticed.connect(self.notices.board.post)
        connections.figures.figures_received.connect(self.monitor.show_figures)
        return connections

    def _build_documents(self):
        from app.ui.docs.documents_page import DocumentsPage

        documents = DocumentsPage(self.bridge)  # indexing yields to the bridge's answers, followed by the page
        documents.noticed.connect(self.notices.board.post)
        documents.collections_changed.connect(self.chat.collections_panel.refresh)
        return documents

    def _build_tools(self):
        from app.ui.tools.tools_page import ToolsPage

        tools = ToolsPage(self.bridge)  # it follows the loaded model and ends dropped servers itself
        tools.noticed.connect(self.notices.board.post)
        tools.servers_changed.connect(self.chat.tools_panel.refresh)
        return tools

    def _build_server(self):
        from app.ui.connections.server_page import ServerPage

        server = ServerPage(self.bridge.local, self.settings, bridge=self.bridge)  # its snippets follow the loads
        server.noticed.connect(self.notices.board.post)
        return server

    # --- construction ---------------------------------------------------------
    def _build_status_bar(self) -> None:
        """Notices on the left (one model: app.ui.widgets.notices), the lasting state on the right."""
        self.notices = NoticeBar(self)
        self.setStatusBar(self.notices)
        self.status = StatusLabels(self.notices, self.bridge, self.models.title)
        # The names tests and older code know them by.
        self.state_label, self.model_label, self.runtime_label = self.status.state, self.status.model, \
            self.status.runtime
        self.speed_label, self.ctx_label, self.mem_label = self.status.speed, self.status.ctx, self.status.mem

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        new_chat = QAction("New chat", self, shortcut=QKeySequence("Ctrl+N"), triggered=self._new_chat)
        file_menu.addAction(new_chat)
        file_menu.addAction(QAction("Import model…", self, triggered=self._import_model))
        file_menu.addSeparator()
        file_menu.addAction(QAction("Import chat…", self, triggered=lambda: self.import_chat()))
        file_menu.addAction(QAction("Export chat as Markdown…", self, triggered=lambda: self.export_chat("markdown")))
        file_menu.addAction(QAction("Export chat as JSON…", self, triggered=lambda: self.export_chat("json")))
        file_menu.addSeparator()
        file_menu.addAction(QAction("Quit", self, shortcut=QKeySequence.Quit, triggered=self.close))
        edit_menu = self.menuBar().addMenu("&Edit")
        edit_menu.addAction(QAction("Copy last answer", self, shortcut=QKeySequence("Ctrl+Shift+C"),
                                    triggered=self.copy_last_answer))
        edit_menu.addAction(QAction("Regenerate last answer", self, shortcut=QKeySequence("Ctrl+R"),
                                    triggered=self._regenerate))
        edit_menu.addAction(QAction("Search chats", self, shortcut=QKeySequence("Ctrl+F"), triggered=self.search_chats))
        edit_menu.addSeparator()
        edit_menu.addAction(QAction("Settings…", self, shortcut=QKeySequence("Ctrl+,"), triggered=self.open_settings))
        view_menu = self.menuBar().addMenu("&View")
        # Simple or full (app/ui/shell/window_mode.py): one switch, also in Settings and offered at the first start.
        self.full_action = QAction("Full window", self, checkable=True, shortcut=QKeySequence("Ctrl+Shift+F"),
                                   toolTip="Every setting, graph and page; off: the simple window")
        self.full_action.toggled.connect(lambda full: self.set_mode(window_mode.FULL if full else window_mode.SIMPLE))
        view_menu.addAction(self.full_action)
        # The dock's own close button takes no focus (Qt draws it in the title bar): its menu action, with a key,
        # opens and closes it from the keyboard (#55 B4).
        monitor_toggle = self.monitor_dock.toggleViewAction()
        monitor_toggle.setShortcut(QKeySequence("Ctrl+Shift+M"))
        monitor_toggle.setToolTip("Show or hide the live monitor (its graphs)")
        view_menu.addAction(monitor_toggle)
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction(QAction("Keyboard shortcuts", self, triggered=self.show_shortcuts))
        help_menu.addAction(QAction("About Hearth", self, triggered=self._about))
        QShortcut(QKeySequence("Ctrl+Return"), self, activated=self.chat.send)
        QShortcut(QKeySequence("Ctrl+Enter"), self, activated=self.chat.send)
        QShortcut(QKeySequence(Qt.Key_Escape), self, activated=self.chat.stop)

    def _connect(self) -> None:
        b = self.bridge
        b.model_loaded.connect(self._on_model_loaded)
        b.load_failed.connect(self._on_load_failed)
        b.engine_crashed.connect(lambda message: self.show_message(message, ERROR, "engine"))
        b.model_unloaded.connect(self._on_model_unloaded)
        self.chat.generation_started.connect(self.status.generation_started)
        self.chat.conversation_changed.connect(self.status.conversation_changed)
        self.models.load_requested.connect(self.load_chosen_model)
        self.models.library_listed.connect(self.chat.picker.set_models)
        for asked in (self.chat.picker.load_requested, self.chat.model_load_requested):
            asked.connect(lambda path: self.load_chosen_model(self.models.options_for(path)))
        self.chat.picker.eject_requested.connect(self.bridge.unload)
        self.chat.model_title = self.models.title  # one name for a model on every page
        self.models.library_listed.connect(self.chat._update_model_banner)  # the library's names, once read
        for page in (self.chat, self.chat.prompt_presets, self.models):
            page.noticed.connect(self.notices.board.post)
        self.models.load_settings.reuse_answers.toggled.connect(self._on_reuse_answers_toggled)
        self.chat.answer_drafts_cost_speed.connect(self._on_answer_drafts_cost_speed)
        # The library's reading too: a loaded model's file located elsewhere is named by its new row (#49.8).
        for signal in (b.model_loading, b.model_loaded, b.load_failed, b.model_unloaded, b.backend_changed,
                       self.models.library_listed):
            signal.connect(self._show_picker_state)
        # The library's names arrive after the first model may have loaded: name it again then.
        self.models.library_listed.connect(self.status.name_loaded_model)
        self.models.jobs.job_finished.connect(self._on_model_job_finished)
        self.models.jobs.job_failed.connect(
            lambda message: self.notifier.job_ended(f"{self.models.jobs.kind.capitalize() or 'Job'} failed", message))
        self.chat.transcript.message_copied.connect(
            lambda _text: self.show_message("Copied to the clipboard", INFO, "copied", COPIED_MS / 1000))

    # --- models ----------------------------------------------------------------
    def load_start_model(self) -> None:
        last = self.settings.get("load_options")
        wrong: list[str] = []
        options = LoadOptions.from_dict(last, wrong) if isinstance(last, dict) else None
        if wrong:
            self.show_message("Some saved load settings were reset: " + "; ".join(wrong) + ".", WARNING,
                              "settings.load")
        if options is not None and options.model_path and not Path(options.model_path).is_file():
            # Moved or deleted since the last session: start with the bundled model rather than nothing.
            self.show_message(f"The last model, {Path(options.model_path).name}, is no longer at "
                              f"{Path(options.model_path).parent}; starting with the bundled model.", WARNING,
                              f"{LOAD_CAUSE}.missing")
            options = None
        if options is None or not options.model_path:
            try:  # with its own options if it was loaded before, else the default ones (Settings)
                options = self.models.kept_options(str(bundled_model_path()))
            except HearthError as exc:
                self._on_load_failed(str(exc))
                return
        self.load_model(options)

    def load_model(self, options: LoadOptions) -> None:
        self.bridge.use_local()  # a local model is asked for: leave a remote server
        self.bridge.load(options)

    def load_chosen_model(self, options: LoadOptions) -> None:
        """A load the user asked for (Models page, picker): an earlier load error has been answered by it."""
        self.models.forget_failure()
        self.notices.clear(LOAD_CAUSE)
        self.load_model(options)

    def _on_model_loaded(self, info: dict) -> None:
        # What the last model's load changed on its own is not this one's; a failed load's error stays until the
        # user asks again (the model before coming back is not an answer to it).
        for cause in ("bufts", "policy"):
            self.notices.clear(f"{LOAD_CAUSE}.{cause}")
        for notice in load_notices(info):
            self.notices.board.post(notice)
        if self.bridge.options is not None:
            self.settings["load_options"] = self.bridge.options.to_dict()
            # Saved now, not only at Settings > OK or a clean exit: a crash must not bring back the old load.
            # After the other handlers of this load (the Models page keeps the model's own options).
            QTimer.singleShot(0, self, self._unless_closed(self.save_state))

    def _show_picker_state(self, *_args) -> None:
        info = self.bridge.info if self.bridge.ready else None
        remote = ""
        if self.bridge.remote:  # the picker names the server's model, not the local one the box held
            remote = (f"{model_title(info)} · on {info.get('endpoint', '')}" if info
                      else f"Connecting to {self.bridge.backend.base_url}…")
        self.chat.picker.show_state(self.models.loaded_path() if info and not self.bridge.remote else None,
                                    self.bridge.loading, self.bridge.remote, remote)
        self.chat.picker.show_tools_badge(info)
        self.models.show_loaded_mark()

    def _on_model_unloaded(self) -> None:
        for cause in ("bufts", "policy"):
            self.notices.clear(f"{LOAD_CAUSE}.{cause}")
        self.models.status.setText("The model was ejected; its memory is free.")

    def show_message(self, message: str, severity: str = ERROR, cause: str = "", lifetime_s="default") -> None:
        """The message bridge: every sentence a user should read passes here, as a notice of the status bar
        (app.ui.widgets.notices): a cause's newer notice replaces its older one."""
        self.notices.board.post(Notice(message, severity, cause, lifetime_s))

    def _on_load_failed(self, message: str) -> None:
        if self.bridge.remote:  # the Connections page shows it beside the server's address
            self.show_message(message, ERROR, f"{LOAD_CAUSE}.failed")
        else:
            self.models.show_error(message, f"{LOAD_CAUSE}.failed")  # which posts it to the status bar

    def _on_reuse_answers_toggled(self, on: bool) -> None:
        self.chat.reuse_answer_drafts = on
        self.settings["reuse_answer_drafts"] = on
        self.save_state()

    def _on_answer_drafts_cost_speed(self, speedup: float) -> None:
        """Drafting from the old answer made an answer slower: it turns itself off, and says so once."""
        self.models.load_settings.reuse_answers.setChecked(False)
        self.show_message(f"Drafting from the old answer made that answer slower ({speedup:.2f}x plain speed), so "
                          "Regenerate and Edit no longer do it; the Models page's load settings turn it back on.",
                          INFO, "drafting")

    # --- window ------------------------------------------------------------------
    def _on_model_job_finished(self, kind: str, path) -> None:
        if path is None:  # cancelled: the user was there to cancel it
            return
        verb = {"download": "Downloaded", "quantize": "Quantized", "convert": "Converted"}.get(kind, "Made")
        self.notifier.job_ended(f"{kind.capitalize()} finished", f"{verb} {Path(path).name}; it is in the library.")

    def _import_model(self) -> None:
        self.tabs.setCurrentWidget(self.models)  # where the imported model shows, selected
        self.models._on_import()

    def export_chat(self, kind: str, path: str | None = None) -> Path | None:
        """The open chat as Markdown or JSON (kind "markdown" or "json"), to `path` or where the user says."""
        cid = self.chat.conversation_id
        conv = self.store.get(cid) if cid is not None else None
        if conv is None:
            self.show_message("Open a chat first: there is nothing to export.", INFO, "chats.export")
            return None
        if path is None:
            suggested = str(Path.home() / file_name(conv.title, kind))
            path, _ = QFileDialog.getSaveFileName(self, "Export chat", suggested,
                                                  "Markdown (*.md)" if kind == "markdown" else "JSON (*.json)")
            if not path:
                return None
        try:
            written = write_export(self.store, cid, path, kind)
        except OSError as exc:
            self.show_message(f"The chat could not be exported to {path}: {exc.strerror or exc}.", ERROR,
                              "chats.export")
            return None
        except HearthError as exc:
            self.show_message(str(exc), ERROR, "chats.export")
            return None
        self.show_message(f"Chat exported to {written}", INFO, "chats.export")
        return written

    def import_chat(self, path: str | None = None) -> int | None:
        """A chat from a JSON export (Hearth's, or OpenAI's messages) as a new conversation, opened."""
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, "Import a chat", str(Path.home()),
                                                  "Chat exports (*.json);;All files (*)")
            if not path:
                return None
        try:
            cid = import_chat(self.store, path)
        except HearthError as exc:  # a bad file: its one sentence, and nothing imported
            self.show_message(str(exc), ERROR, "chats.import")
            return None
        self.tabs.setCurrentWidget(self.chat)
        self.chat.conversations.select(cid)
        self.chat.open_conversation(cid)
        conv = self.store.get(cid)
        count = len(self.store.messages(cid))
        # Said under the same cause as a failed import's error, which it replaces (#49.14).
        self.show_message(f"Imported “{conv.title}” from {Path(path).name} ({count} messages).", INFO,
                          "chats.import")
        return cid

    def copy_last_answer(self) -> None:
        if not self.chat.copy_last_answer():
            self.show_message("This chat has no answer to copy yet.", INFO, "copied")

    def _regenerate(self) -> None:
        self.tabs.setCurrentWidget(self.chat)
        self.chat.regenerate()

    def search_chats(self) -> None:
        self.tabs.setCurrentWidget(self.chat)
        self.chat.conversations.search.setFocus(Qt.ShortcutFocusReason)
        self.chat.conversations.search.selectAll()

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(keys, what they do): the menus' own shortcuts, read from their actions so the list cannot drift,
        and the keys of the message box and the window that no menu holds."""
        rows = [(action.shortcut().toString(QKeySequence.NativeText), action.text().replace("&", "").rstrip("…"))
                for action in self.findChildren(QAction) if not action.shortcut().isEmpty()]
        send = "Enter" if self.chat.input.enter_sends else "Ctrl+Enter"
        line = "Shift+Enter" if self.chat.input.enter_sends else "Enter"
        rows += [(send, "Send the message"), ("Ctrl+Enter", "Send, whichever key sends (Settings)"),
                 (line, "A new line in the message"), ("Esc", "Stop the answer, or leave an edit")]
        seen: set = set()
        return [row for row in rows if not (row in seen or seen.add(row))]

    def show_shortcuts(self) -> QMessageBox:
        """Help > Keyboard shortcuts (returned for tests, which close it without a modal loop)."""
        rows = "".join(f"<tr><td style='padding-right:16px'><b>{html.escape(keys)}</b></td><td>{html.escape(what)}"
                       "</td></tr>" for keys, what in self.shortcut_rows())
        box = QMessageBox(QMessageBox.NoIcon, "Keyboard shortcuts", f"<table>{rows}</table>", QMessageBox.Close, self)
        box.open()
        return box

    def _new_chat(self) -> None:
        self.tabs.setCurrentWidget(self.chat)
        self.chat.new_conversation()

    def _about(self) -> None:
        QMessageBox.about(self, "About Hearth", f"Hearth {__version__}: large language models on your own "
                          "computer, with llama.cpp.")

    def _restore(self) -> None:
        # Each value as app/ui/settings/shape.py declares it: the store left out one that did not fit.
        geometry = self.settings.get("window_geometry")
        if geometry is not None:
            self.restoreGeometry(QByteArray.fromBase64(geometry.encode()))
        else:
            screen = QGuiApplication.primaryScreen()
            free = screen.availableGeometry() if screen is not None else None
            self.resize(*(default_size(free.width(), free.height()) if free is not None else DEFAULT_SIZE))
        state = self.settings.get("window_state")
        if state is not None:
            self.restoreState(QByteArray.fromBase64(state.encode()))
            if self.monitor_dock.width() < MONITOR_MIN_WIDTH:  # saved by a version without a minimum
                self.resizeDocks([self.monitor_dock], [MONITOR_WIDTH], Qt.Horizontal)
        sampling = self.settings.get("sampling")
        if sampling is not None:
            self.chat.sampling.set_options(SamplingOptions.from_dict(sampling))
        self.chat.input.set_enter_sends(shape.value(self.settings, "enter_sends"))
        reuse = shape.value(self.settings, "reuse_answer_drafts")
        self.chat.reuse_answer_drafts = reuse
        with QSignalBlocker(self.models.load_settings.reuse_answers):
            self.models.load_settings.reuse_answers.setChecked(reuse)
        theme.chosen = self.settings.get("theme")

    def open_settings(self) -> SettingsDialog:
        """The Settings dialog (returned for tests, which accept it without a modal loop)."""
        dialog = SettingsDialog(self.settings, self)
        dialog.load_defaults.set_runtime_choices(self.models.runtime_rows)  # the runtimes installed here
        dialog.accepted.connect(lambda: self.apply_settings(dialog.values()))
        dialog.open()
        return dialog

    # --- simple or full (app/ui/shell/window_mode.py) --------------------------------------
    def _build_mode_offer(self) -> None:
        """The first start offers the choice, above the pages, until the user makes it (Settings keeps it)."""
        self.mode_offer = QWidget()
        self.mode_offer.setObjectName("modeOffer")
        text = wrapped("Hearth starts with a simple window: your chats and the model. The full window adds every "
                       "setting, live graphs and the pages for developers. You can switch any time in View.")
        keep = button("Keep it simple", lambda: self.set_mode(window_mode.SIMPLE))
        full = button("Show everything", lambda: self.set_mode(window_mode.FULL))
        hbox((text, 1), keep, full, parent=self.mode_offer).setContentsMargins(8, 4, 8, 4)
        holder = QWidget()
        vbox(self.mode_offer, (self.takeCentralWidget(), 1), parent=holder, margin=0).setSpacing(0)
        self.setCentralWidget(holder)
        self.mode_offer.setVisible(not window_mode.was_chosen(self.settings))

    @property
    def simple(self) -> bool:
        return self.mode == window_mode.SIMPLE

    def set_mode(self, mode: str, save: bool = True) -> None:
        """Show the window simple or full; save: the user chose it (kept in the settings, the offer goes)."""
        self.mode = mode
        simple = mode == window_mode.SIMPLE
        self.chat.set_simple(simple)
        self.models.set_simple(simple)
        for index in range(self.tabs.count()):
            if self.tabs.tabText(index) in window_mode.FULL_ONLY_PAGES:
                self.tabs.setTabVisible(index, not simple)
        self.monitor_dock.setVisible(not simple)
        self.status.set_simple(simple, self.monitor_dock)
        with QSignalBlocker(self.full_action):
            self.full_action.setChecked(not simple)
        if save:
            self.mode_offer.hide()
            self.settings[window_mode.SETTING] = mode
            self.save_state()

    def apply_settings(self, values: dict) -> None:
        if values.get(window_mode.SETTING) in window_mode.MODES and values[window_mode.SETTING] != self.mode:
            self.set_mode(values[window_mode.SETTING], save=False)
        self.settings.update(values)
        self.models.set_defaults(default_load_options(self.settings))
        self.chat.input.set_enter_sends(values["enter_sends"])
        theme.chosen = values["theme"]
        from PySide6.QtWidgets import QApplication

        theme.apply_theme(QApplication.instance())
        self.save_state()

    def save_state(self) -> None:
        self.settings["window_geometry"] = bytes(self.saveGeometry().toBase64()).decode()
        self.settings["window_state"] = bytes(self.saveState().toBase64()).decode()
        self.settings["sampling"] = self.chat.sampling.options().to_dict()
        self.settings.update(self.models.settings_to_save())
        changed = changed_keys(self._settings_saved, self.settings)
        if not changed:
            return
        try:
            save_settings(changed)
        except HearthError as exc:  # a full or read-only disk: said, never swallowed
            self.show_message(f"Settings were not saved: {exc}", ERROR, "settings.save")
            if self._closed:  # the window is going: its status bar is not read any more
                print(f"Hearth: settings were not saved: {exc}", file=sys.stderr)
            return
        self._settings_saved.update(json.loads(json.dumps(changed)))

    def apply_theme(self, dark: bool) -> None:
        self._dark = dark
        for page in (self.pages.built("monitor"), self.pages.built("bench")):
            if page is not None:
                page.apply_theme(dark)

    def closeEvent(self, event) -> None:
        self._closed = True  # the pages not built yet never will be
        self.chat.keep_answer_on_quit()  # before the engine goes: its end would cut the answer unsaved
        if not self.chat.wait_saved(QUIT_SAVE_WAIT_S):  # a lock still held: the draft, as last saved, stays
            print("Hearth: the chat history stayed busy; the last answer is kept as it was last saved and shown "
                  "as interrupted at the next start.", file=sys.stderr)
        self.save_state()
        built = self.pages.built
        if built("monitor"):
            self.monitor.timer.stop()
        self.models.close_tasks()
        for page in (built("bench"), built("connections"), built("documents"), built("tools")):
            if page is not None:
                page.close_tasks()
        self.chat.close_documents()
        from app.backends import vocab

        vocab.close()  # the vocabulary child the draft choices and token counts asked (it outlived the window)
        if built("server"):
            self.server.close_tasks()
        self.bridge.close()
        # The supervisor's threads posted their last news (an unload, a backend change) as queued signals; they
        # are delivered now, while the chat store they read is still open, and nothing after this is.
        self.bridge.blockSignals(True)
        QCoreApplication.sendPostedEvents()
        self.store.close()
        jsonstore.remove_listener(self._store_listener)
        self.closed.emit()
        super().closeEvent(event)
