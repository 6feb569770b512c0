"""Indexing in the background, for the window: one collection at a time on a thread of its own.

The thread opens its own connection to the index (SQLite connections are not shared across threads here), and
reports progress through a queued signal at most a few times a second. It yields to generation: the window
clears the gate while the chat model answers (on two cores an indexer beside a decode would halve both), and
the embedding engine runs below the window's priority anyway. Cancel stops after the file or batch in hand.
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, Signal

from app.core.errors import HearthError

PROGRESS_INTERVAL_S = 0.25


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

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, collection: str, path: str | None = None, vectors: bool = True) -> bool:
        """Index path into collection (None: the collection's folders again). False while another one runs."""
        if self.running:
            return False
        self.cancel_event.clear()
        self.collection = collection
        self.thread = threading.Thread(target=self._run, args=(collection, path, vectors), name="hearth-index",
                                       daemon=True)
        self.thread.start()
        return True

    def _run(self, collection: str, path: str | None, vectors: bool) -> None:
        from app.docs import embed_model
        from app.docs.indexer import Indexer
        from app.docs.store import Store
        from app.docs.vectors import Embedder

        last = [0.0]

        def progress(p) -> None:
            now = time.monotonic()
            if now - last[0] >= PROGRESS_INTERVAL_S or p.done >= p.total:
                last[0] = now
                self.progressed.emit(p)

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
