"""A local Hub-shaped server for GUI tests, throttled on demand so a download lasts long enough to watch."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from tests.helpers.hfserver import FakeHub, FakeRepo, _Handler, _QuietServer


def gguf_bytes(megabytes: float, name: str = "gui-test") -> bytes:
    """A well-formed F16 GGUF of about `megabytes` MB (one tensor), as the library would list it."""
    import gguf

    rows = max(1, int(megabytes * 2**20 / 2 / 1024))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.gguf"
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_name(name)
        writer.add_block_count(1)
        writer.add_context_length(256)
        writer.add_embedding_length(1024)
        writer.add_file_type(1)  # mostly F16
        writer.add_tensor("token_embd.weight", np.ones((rows, 1024), dtype=np.float16))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


class _Throttled:
    """A socket writer that sends at most hub.rate bytes a second, in small pieces.

    The rate is read at each write: a kept-alive connection (opened by a search) obeys a rate set later.
    """

    PIECE = 64 * 1024

    def __init__(self, raw, hub: "SlowHub"):
        self.raw, self.hub = raw, hub

    def write(self, data) -> int:
        view = memoryview(data)
        for i in range(0, len(view), self.PIECE):
            self.raw.write(view[i:i + self.PIECE])
            if self.hub.rate and len(view) > self.PIECE:  # headers and JSON go at full speed
                time.sleep(self.PIECE / self.hub.rate)
        return len(view)

    def __getattr__(self, name):
        return getattr(self.raw, name)


class SlowHub(FakeHub):
    """FakeHub whose file bodies arrive at `rate` bytes a second (None: full speed)."""

    rate: float | None = None

    def start(self) -> "SlowHub":
        hub = self

        class Handler(_Handler):
            state = hub

            def setup(self):
                super().setup()
                self.wfile = _Throttled(self.wfile, hub)

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-hub", daemon=True)
        self.thread.start()
        return self


def gui_hub(big_mb: float = 8) -> SlowHub:
    return SlowHub(repos={
        "acme/Tiny-GGUF": FakeRepo({"tiny-F16.gguf": gguf_bytes(0.3, "tiny"), "README.md": b"# tiny\n"},
                                   downloads=500, likes=7),
        "acme/Big-GGUF": FakeRepo({"big-F16.gguf": gguf_bytes(big_mb, "big")}, downloads=90, likes=1),
        "acme/Gated-GGUF": FakeRepo({"gated-Q4_K_M.gguf": gguf_bytes(0.1, "gated")}, gated=True),
    })
