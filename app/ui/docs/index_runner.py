"""Indexing in the background, for the window: one collection at a time on a thread of its own.

The thread opens its own connection to the index (SQLite connections are not shared across threads here). It
only keeps the indexer's latest progress; a timer on the window's thread shows it a few times a second. (Progress
emitted at most every 0.25 s, at the moment it came, dropped the report that named a long file: the counter sat
at "0 of 97 files" while later files were read, #48 B9.) It yields to generation: the window clears the gate
while the chat model answers (on two cores an indexer beside a decode would halve both), and the embedding
engine runs below the window's priority anyway. Cancel is looked at inside the file in hand too (the parsers
take the cancel flag), and the vector pass stops after the batch in hand.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.errors import HearthError

PROGRESS_MS = 250


class IndexRunner(QObject):
    progressed = Signal(object)  # app.docs.indexer.IndexProgress
    finished = Signal(object)  # app.docs.indexer.IndexReport
    failed = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.gate = threading.Event()
        self.gate.set()
        self.cancel_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.collection: str | None = None
        self._latest = None  # the indexer's last progress, set by its thread, read on the window's
        self._shown = None
        self._poll = QTimer(self, interval=PROGRESS_MS, timeout=self._show_latest)
        self.finished.connect(self._stop_polling)
        self.failed.connect(self._stop_polling)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, collection: str, path: str | None = None, vectors: bool = True) -> bool:
        """Index path into collection (None: the collection's folders again). False while another one runs."""
        if self.running:
            return False
        self.cancel_event.clear()
        self.collection = collection
        self._latest = self._shown = None
        self._poll.start()
        self.thread = threading.Thread(target=self._run, args=(collection, path, vectors), name="hearth-index",
                                       daemon=True)
        self.thread.start()
        return True

    def _run(self, collection: str, path: str | None, vectors: bool) -> None:
        from app.docs import embed_model
        from app.docs.indexer import Indexer
        from app.docs.store import Store
        from app.docs.vectors import Embedder

        def progress(p) -> None:
            self._latest = p  # one assignment: the timer reads the newest, whatever came between

        store = embedder = None
        try:
            model, note = embed_model.ensure() if vectors else (None, None)
            embedder = Embedder(model) if model else None
            store = Store()
            indexer = Indexer(store, embedder=embedder, progress=progress, cancel=self.cancel_event, gate=self.gate)
            report = indexer.add(collection, path) if path else indexer.update(collection)
            report.vectors_note = note
            self.finished.emit(report)
        except HearthError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # a bug: one line here, the trace on stderr
            import traceback

            traceback.print_exc()
            self.failed.emit(f"Internal error while indexing: {type(exc).__name__}: {exc}")
        finally:
            if embedder is not None:
                embedder.close()  # loaded only while indexing
            if store is not None:
                store.close()

    def _show_latest(self) -> None:
        latest = self._latest
        if latest is not None and latest is not self._shown:
            self._shown = latest
            self.progressed.emit(latest)

    def _stop_polling(self, *_args) -> None:
        self._poll.stop()
        self._show_latest()  # the last count before the outcome

    def cancelling(self) -> bool:
        return self.running and self.cancel_event.is_set()

    def hold(self) -> None:
        """The chat model generates: indexing waits after the file or batch in hand."""
        self.gate.clear()

    def resume(self) -> None:
        self.gate.set()

    def cancel(self) -> None:
        self.cancel_event.set()

    def join(self, timeout: float = 30.0) -> None:
        self.cancel()
        self.resume()
        if self.thread is not None:
            self.thread.join(timeout)
