"""`hearth --selftest`: prove that this installation works, in a few seconds, without a display.

It creates the main window offscreen, loads the bundled model in an engine
process and generates a few tokens, quantizes the model, starts `hearth serve`
on loopback and sends it one request as the openai client does, chats with that
server through `hearth chat --endpoint` (the remote backend), and says whether
the system keyring can keep API keys; then it prints one line per check and
exits 0 or 1. A frozen bundle runs the same code, so this is how an installer
is checked on a clean machine: the server and the chat run as the same
commands a user types, which is where a frozen app misses a lazily imported
module. It works in a temporary Hearth home, so the user's settings, chats,
models and logs stay untouched, and it never writes to the keyring.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from app import __version__
from app.core import env
from app.core.errors import HearthError
from app.core.metrics import seconds_since_process_start

PROMPT = "Say hello in one short sentence."
MAX_TOKENS = 8
WINDOW_TIMEOUT_S = 20.0
LOAD_TIMEOUT_S = 180.0
GENERATE_TIMEOUT_S = 120.0
SERVE_START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
LOG_TAIL_LINES = 15


def check_resources() -> str:
    from app.core.resources import resource_path

    path = resource_path("recommended_models.json")
    if not path.is_file():
        raise HearthError(f"{path} is missing; reinstall Hearth.")
    return str(path.parent)


def check_model() -> str:
    from app.core.library.bundled import bundled_model_path
    from app.core.gguf.modelfile import check_model_file

    path = bundled_model_path()
    check_model_file(path)
    return f"{path.name}, {path.stat().st_size / 1e6:.0f} MB, at {path.parent}"


def check_gui() -> str:
    # The selftest must never open a window, nor need a display.
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    started = time.perf_counter()
    from PySide6.QtCore import QEvent, QObject

    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    class _FirstPaint(QObject):
        seen = False

        def eventFilter(self, obj, event):  # noqa: N802 (Qt's name)
            if event.type() == QEvent.Paint:
                self.seen = True
            return False

    app = make_app([])
    window = MainWindow(load_on_start=False)
    watcher = _FirstPaint()
    window.installEventFilter(watcher)
    window.show()
    deadline = time.monotonic() + WINDOW_TIMEOUT_S
    while not watcher.seen and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.005)
    shown_s = time.perf_counter() - started
    since_start = seconds_since_process_start()
    try:
        if not watcher.seen:
            raise HearthError(f"The main window was not painted within {WINDOW_TIMEOUT_S:.0f} s.")
        image = window.grab().toImage()
        if image.isNull() or image.width() < 100 or image.height() < 100:
            raise HearthError("The main window rendered an empty image.")
        size = f"{image.width()}x{image.height()}"
    finally:
        window.removeEventFilter(watcher)
        window.close()
        app.processEvents()
    detail = f"main window {size} painted offscreen in {shown_s:.2f} s"
    if since_start is not None:
        detail += f" ({since_start:.2f} s after the process started)"
    return detail


def check_engine() -> str:
    from app.core.library.bundled import bundled_model_path
    from app.protocol import messages as P
    from app.backends.client import EngineClient

    client = EngineClient()
    try:
        started = time.perf_counter()
        info = client.load(P.LoadOptions(model_path=str(bundled_model_path()), n_ctx=512), timeout=LOAD_TIMEOUT_S)
        load_s = time.perf_counter() - started
        sampling = P.SamplingOptions(max_tokens=MAX_TOKENS, temperature=0.0, seed=1)
        done = {}
        for event in client.chat([{"role": "user", "content": PROMPT}], sampling, timeout=GENERATE_TIMEOUT_S):
            if isinstance(event, P.Done):
                done = event
        text = " ".join(str(done.get("text", "")).split())
        if not done.get("completion_tokens") or not text:
            raise HearthError("The engine loaded the model but generated no text.")
        bufts = {True: "on", False: "off"}.get(info.get("extra_bufts"), "default")
        return (f"loaded in {load_s:.1f} s (extra buffer types {bufts}); {done['completion_tokens']} tokens at "
                f"{done.get('gen_tok_s', 0.0):.1f} tok/s: {text[:60]!r}")
    except HearthError as exc:
        raise HearthError(f"{exc}{_log_tail(client.log_path)}") from None
    finally:
        client.close()


def _log_tail(path: Path | None) -> str:
    if path is None or not path.is_file():
        return ""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return ("\n        engine log:\n" + "\n".join(f"        | {line}" for line in lines)) if lines else ""


def check_quantize() -> str:
    from app.core.library.bundled import bundled_model_path
    from app.core.making.quantize import quantize

    out = Path(env.HOME.get()) / "selftest-Q8_0.gguf"
    result = quantize(bundled_model_path(), "Q8_0", out=out, allow_requantize=True)
    return f"{bundled_model_path().name} -> Q8_0, {result.size_bytes / 1e6:.0f} MB in {result.seconds:.1f} s"


class _Server:
    """`hearth serve` on a free loopback port, as a user starts it; shared by the server and remote checks."""

    def __init__(self):
        self.key = secrets.token_urlsafe(16)
        # The key travels in the environment, as a user would set it, not on a command line `ps` shows.
        server_env = {**os.environ, env.API_KEY.name: self.key}
        from app.core.proc import child_env, hearth_command

        self.log = Path(env.HOME.get()) / "selftest-serve.log"
        self._log_file = open(self.log, "wb")
        self.proc = subprocess.Popen(hearth_command("serve", "--host", "127.0.0.1", "--port", "0", "--ctx", "512"),
                                     stdout=subprocess.PIPE, stderr=self._log_file, stdin=subprocess.DEVNULL,
                                     env=child_env(server_env), text=True)
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(SERVE_START_TIMEOUT_S)
        line = got[0] if got else ""
        if " at http://" not in line:
            self.stop()
            raise HearthError(f"hearth serve did not start within {SERVE_START_TIMEOUT_S:.0f} s: "
                              f"{self._last_words() or 'it printed nothing'}")
        self.base_url = line.split(" at ", 1)[1].split()[0]

    def _last_words(self) -> str:
        lines = [ln for ln in self.log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        return lines[-1].strip() if lines else ""

    def stop(self) -> int | None:
        """Ctrl-C, as a user stops it; its exit code (None when it had to be killed)."""
        code = None
        if self.proc.poll() is None:
            if os.name == "nt":  # no Ctrl-C for a child without a console group of its own
                self.proc.terminate()
            else:
                self.proc.send_signal(signal.SIGINT)
            try:
                code = self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        else:
            code = self.proc.returncode
        self.proc.stdout.close()
        self._log_file.close()
        return code


_server: _Server | None = None


def _stop_server() -> None:
    global _server
    if _server is not None:
        _server.stop()
        _server = None


def check_server() -> str:
    """One streamed chat completion, in the openai client's wire format, from the server on loopback."""
    global _server
    import httpx

    started = time.perf_counter()
    _server = _Server()
    start_s = time.perf_counter() - started
    # What openai.OpenAI(base_url=..., api_key=...).chat.completions.create(..., stream=True) sends: a JSON
    # body at {base}/chat/completions, the key as a bearer token, server-sent events back.
    body = {"model": None, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {_server.key}", "Content-Type": "application/json",
               "Accept": "application/json", "User-Agent": "OpenAI/Python (Hearth selftest)"}
    text, usage, finish, done = [], None, None, False
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
        models = http.get(f"{_server.base_url}/models", headers=headers)  # client.models.list()
        if models.status_code != 200 or not models.json().get("data"):
            raise HearthError(f"GET /models answered HTTP {models.status_code}: {models.text[:200]}")
        body["model"] = models.json()["data"][0]["id"]
        refused = http.post(f"{_server.base_url}/chat/completions", json=body, headers={"Authorization": "Bearer no"})
        if refused.status_code != 401:
            raise HearthError(f"the server answered a wrong API key with HTTP {refused.status_code}, not 401.")
        with http.stream("POST", f"{_server.base_url}/chat/completions", json=body, headers=headers) as reply:
            if reply.status_code != 200:
                reply.read()
                raise HearthError(f"the server answered HTTP {reply.status_code}: {reply.text[:200]}")
            for line in reply.iter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or []:
                    text.append((choice.get("delta") or {}).get("content") or "")
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
    answer = " ".join("".join(text).split())
    if not done or not answer or not usage or not usage.get("completion_tokens"):
        raise HearthError(f"the streamed answer was incomplete (text {answer!r}, usage {usage}, [DONE] {done}).")
    return (f"hearth serve at {_server.base_url} ready in {start_s:.1f} s; streamed chat completion: "
            f"{usage['completion_tokens']} tokens, finish {finish}: {answer[:40]!r}")


def check_remote() -> str:
    """`hearth chat --endpoint`: the remote backend and the command line, against the server above."""
    from app.core.proc import child_env, hearth_command

    if _server is None:
        raise HearthError("skipped: the server check did not start a server.")
    started = time.perf_counter()
    proc = subprocess.run(hearth_command("chat", "--endpoint", _server.base_url, "--prompt", PROMPT, "--temp", "0",
                                         "--max-tokens", str(MAX_TOKENS), "--json"),
                          capture_output=True, text=True, timeout=REQUEST_TIMEOUT_S, stdin=subprocess.DEVNULL,
                          env=child_env({env.API_KEY.name: _server.key}))
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise HearthError(f"hearth chat --endpoint exited with code {proc.returncode}: {said}")
    answer = json.loads(proc.stdout)
    if not answer.get("completion_tokens"):
        raise HearthError("hearth chat --endpoint got no tokens from the server.")
    code = _server.stop()
    # 130 is how a program that stopped on SIGINT exits (uvicorn re-raises the signal it caught).
    if os.name != "nt" and code not in (0, 130):
        raise HearthError(f"hearth serve exited with code {code} on Ctrl-C: {_server._last_words()}")
    return (f"hearth chat --endpoint: {answer['completion_tokens']} tokens in {time.perf_counter() - started:.1f} s "
            f"from {answer.get('model')}; hearth serve stopped cleanly on Ctrl-C")


# The backend that keeps secrets on each system, as keyring names its module.
NATIVE_KEYRING = {"linux": ("keyring.backends.SecretService", "Keyring"),
                  "darwin": ("keyring.backends.macOS", "Keyring"),
                  "win32": ("keyring.backends.Windows", "WinVaultKeyring")}


def check_keyring() -> str:
    """Which keyring keeps API keys; a system without a keyring service passes with the sentence users see.

    It fails only when the installation lacks the code to reach a keyring (a bundle that left out a
    module), since then no keyring service could ever be used. Nothing is written to the keyring.
    """
    import importlib

    import keyring

    platform_key = "linux" if sys.platform.startswith("linux") else sys.platform
    module_name, class_name = NATIVE_KEYRING.get(platform_key, (None, None))
    reason = None
    if module_name is not None:
        try:
            native = getattr(importlib.import_module(module_name), class_name)
            native.priority  # noqa: B018 (keyring's viability check: it raises with the reason)
        except ImportError as exc:
            raise HearthError(f"this installation cannot reach the system keyring: {exc}.") from None
        except Exception as exc:
            reason = str(exc)
            if "required" in reason:  # keyring's words for a missing module (SecretStorage required)
                raise HearthError(f"this installation cannot reach the system keyring: {reason}.") from None
    active = keyring.get_keyring()
    name = f"{type(active).__module__}.{type(active).__name__}"
    if "fail" in type(active).__module__:
        from app.core.api_keys import KeyStore

        # What the connections page shows in this case; the fail backend stores nothing, so this is harmless.
        sentence = KeyStore().save("http://selftest.invalid/v1", "x") or ""
        return f"no keyring service runs here ({reason or 'none found'}); users are told: {sentence!r}"
    return f"API keys go to {name}"


def check_media() -> str:
    """The engine's own runtime opens libmtmd (a model's projector: images and sounds), as a frozen bundle must
    carry it; in a child process with the runtime's environment, as the engine runs."""
    from app.core.making.runtimes import find_runtime, probe_runtime

    probe = probe_runtime(find_runtime("cpu"))
    if not (probe.ok and probe.media):
        raise HearthError(probe.error or "libmtmd does not load beside libllama: models that see and hear would "
                                         "answer text only")
    return "libmtmd loads beside libllama: a model's projector can open (images and sounds)"


def check_runtimes() -> str:
    """Each engine runtime this install ships loads in a child process (its libraries, their system Vulkan
    loader) and lists its devices; a machine without a GPU lists none, which is no failure."""
    from app.core.making.runtimes import list_runtimes, probe_runtime

    shipped = [r for r in list_runtimes() if r.origin == "shipped"]
    if not shipped:
        return "no GPU runtime is shipped in this build (cpu only)"
    said = []
    for runtime in shipped:
        probe = probe_runtime(runtime)
        if not probe.ok:
            raise HearthError(probe.error or f"the {runtime.name} runtime did not load")
        if not probe.media:
            raise HearthError(f"the {runtime.name} runtime has no libmtmd: models that see and hear would answer "
                              "text only on it")
        devices = ", ".join(d.description or d.name for d in probe.gpus) or "no GPU here"
        hidden = [d.get("name") for d in probe.hidden_software_vulkan()]
        said.append(f"{runtime.name} ({runtime.key}) loads; devices: {devices}"
                    + (f" (software, not used unless named: {', '.join(map(str, hidden))})" if hidden else ""))
    return "; ".join(said)


def check_documents() -> str:
    """The documents' embedding model this install has (a bundle ships one) embeds in its own engine process,
    and a paraphrase lands nearer than an unrelated sentence; without one, BM25 serves alone, which is no
    failure."""
    from app.docs import embed_model

    path = embed_model.find()
    if path is None:
        return "no embedding model here: documents search is BM25 alone"
    import numpy as np

    from app.docs.vectors import Embedder

    with Embedder(path) as embedder:
        a, b, c = embedder.embed(["The cat sits on the mat.", "A kitten is resting on a rug.",
                                  "Stock markets fell sharply today."])
    near, far = float(np.dot(a, b)), float(np.dot(a, c))
    if not near > far + 0.2:
        raise HearthError(f"the embedding model {path.name} gives a paraphrase {near:.2f} and an unrelated "
                          f"sentence {far:.2f}: its vectors do not follow meaning")
    return f"{path.name}: {embedder.dim} dimensions, paraphrase {near:.2f} against unrelated {far:.2f}"


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("resources", check_resources),
    ("model", check_model),
    ("gui", check_gui),
    ("engine", check_engine),
    ("media", check_media),
    ("runtimes", check_runtimes),
    ("quantize", check_quantize),
    ("documents", check_documents),
    ("server", check_server),
    ("remote", check_remote),
    ("keyring", check_keyring),
]


def _describe_build() -> str:
    kind = "frozen bundle" if getattr(sys, "frozen", False) else "Python install"
    return (f"Hearth {__version__} selftest ({kind}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.machine()}, executable {sys.executable})")


def run_selftest() -> int:
    print(_describe_build(), flush=True)
    # Always a home of its own, even where HEARTH_HOME is set: the checks write a quantized model, logs and
    # library entries that must not land in anyone's real library.
    users_home = os.environ.get(env.HOME.name)
    os.environ[env.HOME.name] = tempfile.mkdtemp(prefix="hearth-selftest-")
    failures = []
    try:
        for name, check in CHECKS:
            try:
                detail = check()
            except HearthError as exc:
                detail, ok = str(exc), False
            except Exception as exc:  # the report must name any failure, whatever raised it
                where = traceback.extract_tb(exc.__traceback__)[-1]
                place = "/".join(Path(where.filename).parts[-2:])
                detail, ok = f"{type(exc).__name__}: {exc} (at {place}:{where.lineno})", False
            else:
                ok = True
            if not ok:
                failures.append(f"{name}: {detail.splitlines()[0]}")
            print(f"  {'ok  ' if ok else 'FAIL'}  {name:<9}  {detail}", flush=True)
    finally:
        _stop_server()
        shutil.rmtree(os.environ.pop(env.HOME.name), ignore_errors=True)
        if users_home is not None:
            os.environ[env.HOME.name] = users_home
    if failures:
        print(f"selftest failed: {'; '.join(failures)}", flush=True)
        return 1
    print("selftest passed", flush=True)
    return 0
