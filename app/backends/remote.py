"""A remote OpenAI-compatible server as a backend: llama.cpp's llama-server, vLLM, Ollama, LM Studio,
llama-cpp-python's server, or another `hearth serve`.

Over 600 lines because it is one backend whole: the seam's every call over HTTP, the stream's reading, and the
many ways a server that is not Hearth's answers (no usage, no ids, other error shapes).

`RemoteEndpoint(base_url, api_key, model)` implements the Backend seam (app.backends.backend) over HTTP
with httpx, so the CLI, the window and the API server drive it as they drive the local engine:

- `load` checks the server (GET {base}/models) on a worker thread, picks the model and reports a
  Loaded event whose fields a remote cannot know (memory, layers, threads, ...) are None;
- `chat` / `complete` POST a streamed /chat/completions or /completions request, each on a daemon
  thread of its own, and turn the server-sent chunks into Token and Stats events and one Done with the
  local engine's keys (counts from the server's usage chunk, None where it sends none; times measured
  from the stream);
- `cancel(id)` shuts that request's socket down, so the server sees the client leave and stops;
- every failure is one Failed event with a sentence: a host that cannot be reached, TLS, a refused
  key, a missing model, a busy server, an answer cut off mid-stream (the text received so far is kept
  in the Failed event's "text"), a reply that is not OpenAI's shape.

Error kinds: a failed check is MODEL_LOAD, a busy or not-yet-ready server (429, 503) is BUSY, a prompt
the server says is too long is CONTEXT_LENGTH, and anything else during an answer is GENERATION; the
blocking facade raises the matching HearthError.
"""

from __future__ import annotations

import itertools
import json
import socket
import ssl
import threading
import time
from typing import Any, Callable, Iterator

import httpx

from app.core.errors import EngineBusy, HearthError, ModelLoadError
from app.core.gguf.sampling import RECOMMENDABLE
from app.protocol import messages as P
from app.protocol.media import openai_part
from app.backends.backend import BackendListener, EngineState, Sink, StateNews
from app.protocol.coalesce import coalescing

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 300.0  # the longest wait for the next chunk: a long prompt on a slow server
CHECK_TIMEOUT_S = 15.0  # GET /models
FIGURES_TIMEOUT_S = 2.0  # llama-server's /props and /slots: extras, never worth a long wait
STATS_INTERVAL_S = 0.2  # as the local engine's live figures
MAX_DETAIL = 200  # characters of a server's error message quoted in a sentence


class _Refused(Exception):
    """One request failed: its kind and sentence (and the partial answer, if any)."""

    def __init__(self, kind: P.ErrorKind, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message

    def hearth_error(self) -> HearthError:
        return self.kind.error(self.message)


class _Request:
    def __init__(self, rid: int, sink: Sink):
        self.id, self.sink = rid, sink
        self.cancelled = threading.Event()
        self.response: httpx.Response | None = None
        self.thread: threading.Thread | None = None

    def cancel(self) -> None:
        self.cancelled.set()
        if self.response is not None:
            _shut_down(self.response)


def _shut_down(response: httpx.Response) -> None:
    """Wake the thread reading this response and drop the connection: the server sees the client leave.

    Closing a socket does not wake a thread blocked reading it; shutting it down does."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed already


def _sentence_part(text: Any) -> str:
    """A server's message as part of our sentence: one line, no closing period, not too long."""
    text = " ".join(str(text).split()).rstrip(". ")
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def _server_message(response: httpx.Response) -> str:
    """What an error response says, whatever its shape: OpenAI's envelope, {"error": "..."},
    FastAPI's {"detail": ...}, or plain text."""
    try:
        body = response.json()
    except ValueError:
        return _sentence_part(response.text) or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body.get("message")))
        if isinstance(error, dict):
            error = error.get("message") or error
        if error:
            return _sentence_part(error if isinstance(error, str) else json.dumps(error))
    return _sentence_part(json.dumps(body))


def _error_code(response: httpx.Response) -> str | None:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None


def _in_chain(exc: BaseException, kind: type) -> BaseException | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def api_base(text: str) -> str:
    """A server's OpenAI base URL as typed ("host:8080/v1", "http://host:8080/v1/"), in one spelling;
    raises ModelLoadError with a sentence for something that is not a server address."""
    url = text.strip()
    if "://" not in url:
        url = "http://" + url
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise ModelLoadError(f"'{text}' is not a server address; give its OpenAI base URL, "
                             "for example http://127.0.0.1:8080/v1.")
    return url.rstrip("/")


class RemoteEndpoint(StateNews):
    """Any OpenAI-compatible server behind the Backend seam; thread-safe, never blocks the caller
    (except models(), which asks the server)."""

    name = "remote"

    def __init__(self, base_url: str, api_key: str | None = None, model: str | None = None):
        self.base_url = api_base(base_url)
        self.api_key = api_key or None
        self.model = model or None
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.Client(headers=headers, timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._requests: dict[int, _Request] = {}
        self._load_generation = 0
        self.listeners: list[BackendListener] = []
        self.info: dict | None = None
        self.loading = False
        self.closed = False
        self._has_slots = True  # until the server shows it has no /slots (only llama-server has them)

    # --- state -----------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.info is not None and not self.loading

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._requests)

    @property
    def state(self) -> EngineState:
        if self.closed:
            return EngineState.STOPPED
        if self.loading:
            return EngineState.LOADING
        if self.info is None:
            return EngineState.EMPTY
        return EngineState.BUSY if self.busy else EngineState.READY

    # A server elsewhere: no process of ours, no log of ours, and its own restarts are its own.
    alive = property(lambda self: not self.closed)
    pid = None
    log_path = None
    stalled = None

    def stop_restarting(self) -> None:
        pass

    def stats(self) -> dict:
        with self._lock:
            return {"backend": self.name, "url": self.base_url, "ready": self.ready, "loading": self.loading,
                    "busy": self.busy, "model": dict(self.info) if self.info else None, "pid": None, "log": None,
                    "state": self.state.value}


    # --- the server's models ------------------------------------------------
    def models(self) -> list[dict]:
        """The models the server lists, the one in use marked; raises the HearthError of a failed check."""
        try:
            listed = self._list_models()
        except _Refused as exc:
            raise exc.hearth_error() from None
        current = self.info.get("model") if self.info else None
        return [{**entry, "id": entry["id"], "path": self.base_url, "loaded": entry["id"] == current}
                for entry in listed]

    def _list_models(self) -> list[dict]:
        url = self.base_url + "/models"
        try:
            response = self._http.get(url, timeout=httpx.Timeout(CHECK_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, P.ErrorKind.MODEL_LOAD) from None
        if response.status_code == 404:
            raise _Refused(P.ErrorKind.MODEL_LOAD,
                           f"{url} answered 404, so {self.base_url} is not an OpenAI-compatible API base; "
                           "such a base usually ends in /v1.")
        if response.status_code != 200:
            raise self._status_error(response, P.ErrorKind.MODEL_LOAD)
        try:
            data = response.json()["data"]
            assert isinstance(data, list) and all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data)
        except (ValueError, KeyError, TypeError, AssertionError):
            raise _Refused(P.ErrorKind.MODEL_LOAD,
                           f"{url} did not answer with OpenAI's model list, so {self.base_url} is not an "
                           f"OpenAI-compatible API base (it sent: {_sentence_part(response.text[:80])}).") from None
        return data

    def _pick(self, listed: list[dict]) -> dict:
        ids = [m["id"] for m in listed]
        if not listed:
            raise _Refused(P.ErrorKind.MODEL_LOAD, f"The server at {self.base_url} lists no models.")
        if self.model is None:
            return listed[0]
        for entry in listed:
            # llama-cpp-python's server names a model by its file path: its file name names it too.
            if self.model in (entry["id"], _file_name(entry["id"]), _stem(entry["id"])):
                return entry
        raise _Refused(P.ErrorKind.MODEL_LOAD, f"The server at {self.base_url} has no model '{self.model}'; "
                       f"it has {', '.join(repr(i) for i in ids)}.")

    def _describe(self, entry: dict) -> P.Loaded:
        """The Loaded event: what the server says about the model, None for what it does not."""
        meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
        n_ctx = _first_int(meta.get("n_ctx"), entry.get("max_model_len"), entry.get("context_length"),
                           entry.get("max_context_length"))
        # llama-server's /props says what its model list does not: asked once, and only then.
        props = self._server_json("/props") if n_ctx is None or "modalities" not in meta else None
        if n_ctx is None:
            n_ctx = _props_n_ctx(props)
        return P.Loaded({
            "ev": P.LOADED, "id": None, "model": entry["id"], "name": _stem(entry["id"]), "path": self.base_url,
            "remote": True, "endpoint": self.base_url, "owned_by": entry.get("owned_by"), "desc": None,
            "n_params": _first_int(meta.get("n_params")), "size_bytes": _first_int(meta.get("size")),
            "n_layer": None, "n_ctx": n_ctx, "n_ctx_train": _first_int(meta.get("n_ctx_train")),
            "n_threads": None, "n_gpu_layers": None, "extra_bufts": None, "can_shift": None, "load_s": None,
            "rss_mb": None, "chat_template": None, "chat_format": None, "window": None, "drafter": None,
            "media": _media(meta, props),
        })

    def _server_json(self, path: str) -> Any:
        """GET one of llama-server's own endpoints (beside /v1); None from a server without it."""
        root = self.base_url.removesuffix("/v1")
        try:
            response = self._http.get(root + path, timeout=httpx.Timeout(FIGURES_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))
            return response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def server_figures(self) -> dict | None:
        """The server's KV-cache use, from llama-server's /slots; None from servers that do not tell.

        {"n_past": tokens held by the fullest slot, "n_ctx": that slot's context, "slots": N,
        "slots_busy": M}. A server that once answered without slots is not asked again."""
        if not self._has_slots:
            return None
        slots = self._server_json("/slots")
        if not isinstance(slots, list) or not all(isinstance(s, dict) and _first_int(s.get("n_ctx")) for s in slots):
            self._has_slots = False
            return None
        fullest = max(slots, key=_slot_tokens, default=None)
        if fullest is None:
            return None
        return {"n_past": _slot_tokens(fullest), "n_ctx": fullest["n_ctx"], "slots": len(slots),
                "slots_busy": sum(bool(s.get("is_processing")) for s in slots)}

    # --- loading: checking the server ----------------------------------------
    def load(self, options: P.LoadOptions | None = None) -> None:
        """Check the server and choose the model, on a worker thread; listeners hear how it went.

        A remote server loads its own models: the local load options (context, threads, ...) do not apply."""
        options = options or P.LoadOptions()
        with self._lock:
            self._load_generation += 1
            generation = self._load_generation
            self.loading, self.info = True, None
        self._tell(lambda listener: listener.model_loading(options))
        threading.Thread(target=self._check, args=(generation,), name="remote-check", daemon=True).start()

    def _check(self, generation: int) -> None:
        try:
            outcome: P.Event = self._describe(self._pick(self._list_models()))
        except _Refused as exc:
            outcome = P.failed(exc.kind, exc.message)
        except Exception as exc:  # a bug here must still end the load
            outcome = P.failed(P.ErrorKind.INTERNAL, f"Checking {self.base_url} failed: {type(exc).__name__}: {exc}.")
        with self._lock:
            if generation != self._load_generation or self.closed:
                return  # cancelled, or another load was asked for meanwhile
            self.loading = False
            if isinstance(outcome, P.Loaded):
                self.info = outcome
        if isinstance(outcome, P.Loaded):
            self._tell(lambda listener: listener.model_loaded(outcome))
        else:
            self._tell(lambda listener: listener.load_failed(outcome))

    def cancel_load(self) -> None:
        with self._lock:
            if self.loading:
                self._load_generation += 1
                self.loading = False

    # --- answers ---------------------------------------------------------
    def chat(self, messages: list[dict], sampling: P.SamplingOptions, sink: Sink,
             stream_interval_ms: float = 0, truncate: bool = True, tools: list[dict] | None = None) -> int:
        """Start an answer; Token/Stats events and then one Done or Failed go to sink.

        truncate is the server's business: an OpenAI server refuses a prompt longer than its context."""
        if tools:
            raise HearthError("Tool calls through a remote server are not supported yet; call its API directly.")
        # Images and sounds go in OpenAI's own parts (image_url data URLs, input_audio), as llama-server, vLLM and
        # Hearth take them; whether the server's model takes them is the server's to say.
        body = {"messages": [{"role": m["role"], "content": [openai_part(p) for p in m["content"]]
                              if isinstance(m["content"], list) else m["content"]} for m in messages]}
        return self._start("/chat/completions", body, sampling, sink, stream_interval_ms, chat=True)

    def complete(self, prompt: str, sampling: P.SamplingOptions, sink: Sink, stream_interval_ms: float = 0,
                 truncate: bool = True) -> int:
        return self._start("/completions", {"prompt": prompt}, sampling, sink, stream_interval_ms, chat=False)

    def embed(self, inputs: list, sink: Sink) -> int:
        """The server's /embeddings for the inputs, on a thread; one Done (embeddings, prompt_tokens, n_embd)."""
        with self._lock:
            model = self.info.get("model") if self.info else self.model
            request = _Request(next(self._ids), sink)
        body = {**({"model": model} if model else {}), "input": inputs, "encoding_format": "float"}
        request.thread = threading.Thread(target=self._embed, args=(request, body), name="remote-embed",
                                          daemon=True)
        request.thread.start()
        return request.id

    def _embed(self, request: _Request, body: dict) -> None:
        url = self.base_url + "/embeddings"
        try:
            try:
                response = self._http.post(url, json=body)
            except httpx.HTTPError as exc:
                raise self._transport_error(exc, P.ErrorKind.GENERATION) from None
            if response.status_code != 200:
                raise self._status_error(response, P.ErrorKind.GENERATION)
            try:
                data = sorted(response.json()["data"], key=lambda d: d["index"])
                vectors = [[float(x) for x in d["embedding"]] for d in data]
                usage = response.json().get("usage") or {}
            except (ValueError, KeyError, TypeError, AttributeError):
                raise self._not_openai(url, response.text[:80]) from None
            event: P.Event = P.Done({"ev": P.DONE, "id": request.id, "embeddings": vectors,
                                     "prompt_tokens": _first_int(usage.get("prompt_tokens")),
                                     "n_embd": len(vectors[0]) if vectors else None})
        except _Refused as exc:
            event = P.failed(exc.kind, exc.message, request.id)
        request.sink(event)

    def _start(self, path: str, body: dict, sampling: P.SamplingOptions, sink: Sink, interval_ms: float,
               chat: bool) -> int:
        with self._lock:
            if self.closed:
                raise HearthError("This remote connection is closed.")
            if self.loading:
                raise EngineBusy(f"Hearth is still checking {self.base_url}; try again in a moment.")
            model = self.info.get("model") if self.info else self.model
            request = _Request(next(self._ids), sink)
            self._requests[request.id] = request
        try:  # until its thread runs, a request that cannot start must not stay taken (busy for good)
            body = {**({"model": model} if model else {}), **body, **_sampling_body(sampling),
                    "stream": True, "stream_options": {"include_usage": True}}
            request.thread = threading.Thread(target=self._answer, args=(request, path, body, interval_ms, chat),
                                              name=f"remote-request-{request.id}", daemon=True)
            request.thread.start()
        except BaseException:
            with self._lock:
                self._requests.pop(request.id, None)
            raise
        return request.id

    def _answer(self, request: _Request, path: str, body: dict, interval_ms: float, chat: bool) -> None:
        def deliver(event: dict) -> None:
            typed = P.EVENT_TYPES[event["ev"]]({**event, "id": request.id})
            if isinstance(typed, (P.Done, P.Failed)):
                with self._lock:
                    self._requests.pop(request.id, None)
            request.sink(typed)

        emit = coalescing(deliver, interval_ms)
        answer = _Answer(self.info.get("n_ctx") if self.info else None)
        try:
            self._stream(request, path, body, chat, answer, emit)
            if answer.chunks > 1:  # the speed at the end: a short answer may end before a second Stats is due
                emit(answer.stats())
            event = answer.done("cancelled" if request.cancelled.is_set() and answer.reason is None else None)
        except _Refused as exc:
            event = P.failed(exc.kind, exc.message, text=answer.text)
        except Exception as exc:  # a bug: the request must still end
            event = P.failed(P.ErrorKind.INTERNAL, f"Internal error talking to {self.base_url}: "
                             f"{type(exc).__name__}: {_sentence_part(exc)}.", text=answer.text)
        emit(dict(event))

    def _stream(self, request: _Request, path: str, body: dict, chat: bool, answer: "_Answer",
                emit: Callable[[dict], None]) -> None:
        url = self.base_url + path
        try:
            with self._http.stream("POST", url, json=body) as response:
                request.response = response
                if request.cancelled.is_set():
                    return
                if response.status_code != 200:
                    response.read()
                    raise self._status_error(response, P.ErrorKind.GENERATION)
                kind = response.headers.get("content-type", "")
                if "text/event-stream" in kind:
                    for chunk in self._chunks(response, url):
                        if request.cancelled.is_set():
                            return
                        answer.take(chunk, chat, emit)
                elif "json" in kind:  # a server that does not stream answers in one piece
                    answer.take(self._whole(response, url), chat, emit)
                else:
                    raise self._not_openai(url, response.text[:80])
                if answer.reason is None and not request.cancelled.is_set():
                    raise _Refused(P.ErrorKind.GENERATION,
                                   f"The answer from {self.base_url} ended without a finish reason after "
                                   f"{answer.chunks} chunks; the partial answer is kept.")
        except httpx.HTTPError as exc:
            if request.cancelled.is_set():
                return  # the socket was shut down by cancel()
            if answer.started:
                reason = _sentence_part(exc) or type(exc).__name__
                raise _Refused(P.ErrorKind.GENERATION,
                               f"The connection to {self.base_url} broke mid-answer after {answer.chunks} chunks "
                               f"({reason}); the partial answer is kept.") from None
            raise self._transport_error(exc, P.ErrorKind.GENERATION) from None
        finally:
            request.response = None

    def _chunks(self, response: httpx.Response, url: str) -> Iterator[dict]:
        """The JSON objects of a server-sent event stream, up to [DONE]."""
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue  # blank separators, ": ping" comments, "event:" names
            payload = line[5:].strip()
            if payload == "[DONE]":
                return
            try:
                chunk = json.loads(payload)
            except ValueError:
                raise self._not_openai(url, payload[:80]) from None
            if isinstance(chunk, dict) and chunk.get("error"):
                raise _Refused(P.ErrorKind.GENERATION, f"The server at {self.base_url} failed mid-answer: "
                               f"{_sentence_part(_message_of(chunk['error']))}; the partial answer is kept.")
            if not isinstance(chunk, dict) or not isinstance(chunk.get("choices", []), list):
                raise self._not_openai(url, payload[:80])
            yield chunk

    def _whole(self, response: httpx.Response, url: str) -> dict:
        try:
            body = response.json()
        except ValueError:
            raise self._not_openai(url, response.text[:80]) from None
        if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
            raise self._not_openai(url, response.text[:80])
        for choice in body["choices"]:  # the whole answer as one chunk
            if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                choice["delta"] = choice["message"]
        return body

    # --- errors as sentences ---------------------------------------------
    def _not_openai(self, url: str, sample: str) -> _Refused:
        return _Refused(P.ErrorKind.GENERATION, f"{url} did not answer in OpenAI's format "
                        f"(it sent: {_sentence_part(sample) or 'nothing'}), so {self.base_url} may not be an "
                        "OpenAI-compatible API base.")

    def _transport_error(self, exc: httpx.HTTPError, kind: P.ErrorKind) -> _Refused:
        """The sentence for a request that got no HTTP answer."""
        base = self.base_url
        tls = _in_chain(exc, ssl.SSLError)
        if tls is not None:
            reason = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or str(tls)
            reason = _sentence_part(reason).replace("_", " ").lower()
            return _Refused(kind, f"Cannot connect securely to {base}: TLS failed ({reason}).")
        if isinstance(exc, httpx.ConnectTimeout):
            return _Refused(kind, f"Cannot reach {base}: no answer within {CONNECT_TIMEOUT_S:g} seconds.")
        if isinstance(exc, httpx.ReadTimeout):
            return _Refused(P.ErrorKind.GENERATION,
                            f"The server at {base} sent nothing for {READ_TIMEOUT_S:g} seconds.")
        if isinstance(exc, httpx.ConnectError):
            if _in_chain(exc, ConnectionRefusedError) is not None or "refused" in str(exc).lower():
                return _Refused(kind, f"Cannot reach {base}: connection refused.")
            if _in_chain(exc, socket.gaierror) is not None:
                return _Refused(kind, f"Cannot reach {base}: the host name '{httpx.URL(base).host}' is not known.")
            return _Refused(kind, f"Cannot reach {base}: {_sentence_part(exc).lower() or 'connection failed'}.")
        if isinstance(exc, httpx.RemoteProtocolError):
            return _Refused(kind, f"The server at {base} closed the connection without an HTTP answer "
                            f"({_sentence_part(exc)}).")
        return _Refused(kind, f"Talking to {base} failed: {type(exc).__name__}: {_sentence_part(exc)}.")

    def _status_error(self, response: httpx.Response, kind: P.ErrorKind) -> _Refused:
        """The sentence for an HTTP error status."""
        base, status, said = self.base_url, response.status_code, _server_message(response)
        if status in (401, 403):
            key = "the API key" if self.api_key else "a request without an API key"
            return _Refused(P.ErrorKind.MODEL_LOAD, f"The server at {base} refused {key} (HTTP {status}: {said}).")
        if status == 404:
            return _Refused(P.ErrorKind.MODEL_LOAD, f"The server at {base} has no such model or path "
                            f"(HTTP 404: {said}).")
        if status in (429, 503):
            return _Refused(P.ErrorKind.BUSY, f"The server at {base} is busy (HTTP {status}: {said}); "
                            "try again in a moment.")
        if _error_code(response) == "context_length_exceeded" or "context" in said.lower() and status == 400:
            return _Refused(P.ErrorKind.CONTEXT_LENGTH, f"The server at {base} refused the prompt as too long "
                            f"(HTTP {status}: {said}).")
        return _Refused(kind, f"The server at {base} refused the request "
                        f"(HTTP {status}: {said}).")

    # --- stopping --------------------------------------------------------
    def cancel(self, request_id: int | None = None) -> None:
        """Stop one answer (every running one without an id); it ends with a Done, finish_reason 'cancelled'."""
        with self._lock:
            targets = [r for rid, r in self._requests.items() if request_id is None or rid == request_id]
        for request in targets:
            request.cancel()

    def reset(self, sink: Sink | None = None) -> int:
        """Nothing to forget: each request to a server carries the whole conversation."""
        return self._acknowledge(sink)

    def unload(self, sink: Sink | None = None) -> int:
        """Stop using the server's model (the server keeps it loaded for its other clients)."""
        with self._lock:
            self.info = None
        return self._acknowledge(sink)

    def _acknowledge(self, sink: Sink | None) -> int:
        rid = next(self._ids)
        if sink is not None:
            sink(P.Ok({"ev": P.OK, "id": rid}))
        return rid

    def close(self, timeout: float = 3.0) -> None:
        with self._lock:
            self.closed = True
            self._load_generation += 1
            self.loading = False
            requests = list(self._requests.values())
        for request in requests:
            request.cancel()
        deadline = time.monotonic() + timeout
        for request in requests:
            if request.thread is not None and request.thread is not threading.current_thread():
                request.thread.join(max(0.0, deadline - time.monotonic()))
        self._http.close()


class _Answer:
    """One streamed answer as it arrives: its text, counts and times, and the Done they make."""

    def __init__(self, n_ctx: int | None):
        self.n_ctx = n_ctx
        self.t0 = time.perf_counter()
        self.parts: list[str] = []
        self.chunks = 0  # chunks with text: one token each on llama.cpp servers
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.next_stats = 0.0
        self.reason: str | None = None
        self.usage: dict = {}
        self.timings: dict = {}
        self.started = False

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def take(self, chunk: dict, chat: bool, emit: Callable[[dict], None]) -> None:
        self.started = True
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):  # llama-server's own figures
            self.timings = chunk["timings"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") if chat else choice
            text = delta.get("content") if chat and isinstance(delta, dict) else (delta or {}).get("text")
            if isinstance(text, str) and text:
                now = time.perf_counter()
                self.t_first = self.t_first or now
                self.t_last = now
                self.chunks += 1
                self.parts.append(text)
                emit({"ev": P.TOKEN, "text": text})
                if now >= self.next_stats:
                    self.next_stats = now + STATS_INTERVAL_S
                    emit(self.stats())
            if choice.get("finish_reason"):
                self.reason = choice["finish_reason"]

    def stats(self) -> dict:
        return {"ev": P.STATS, "completion_tokens": self.chunks, "gen_tok_s": self._rate(self.chunks),
                "n_past": None, "n_ctx": self.n_ctx, "prompt_tokens": None}

    def _rate(self, n: int | None) -> float:
        """Tokens a second after the first one, as the stream delivered them."""
        if not n or n < 2 or self.t_first is None or self.t_last is None or self.t_last <= self.t_first:
            return 0.0
        return (n - 1) / (self.t_last - self.t_first)

    def done(self, reason: str | None) -> P.Done:
        t_end = time.perf_counter()
        usage = self.usage
        prompt = _first_int(usage.get("prompt_tokens"))
        completion = _first_int(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
        cached = _first_int(details.get("cached_tokens"))
        evaluated = _first_int(self.timings.get("prompt_n"))
        if evaluated is None and prompt is not None and cached is not None:
            evaluated = prompt - cached
        return P.Done({
            "ev": P.DONE, "text": self.text, "finish_reason": reason or self.reason,
            "stop_sequence": None,  # OpenAI's servers do not say which stop string ended an answer
            "prompt_tokens": prompt, "prompt_evaluated": evaluated, "completion_tokens": completion,
            "ttft_s": (self.t_first or t_end) - self.t0, "prompt_s": None,
            "prompt_tok_s": _first_float(self.timings.get("prompt_per_second")),
            "gen_s": (t_end - self.t_first) if self.t_first else 0.0,
            # From the server's count when it sends one, else one token per chunk with text.
            "gen_tok_s": self._rate(completion if completion is not None else self.chunks),
            "stream_chunks": self.chunks, "n_past": None, "n_ctx": self.n_ctx, "rss_mb": None, "peak_rss_mb": None,
            "window": None, "spec": None,
            # A server does not say how much of a long prompt it left out, nor on how many threads it runs.
            "prompt_dropped": None, "n_threads": None,
        })


def _sampling_body(s: P.SamplingOptions) -> dict:
    """SamplingOptions as OpenAI's fields plus the llama.cpp ones llama-server, vLLM and Hearth take."""
    body: dict[str, Any] = {
        "max_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k,
        "min_p": s.min_p, "repeat_penalty": s.repeat_penalty, "frequency_penalty": s.frequency_penalty,
        "presence_penalty": s.presence_penalty,
    }
    if s.given is not None:
        # A setting the user did not give is left to the server: its model's recommendation (general.sampling.*,
        # which Hearth and llama-server both apply) or its own default, as for any other client of that server.
        for name in RECOMMENDABLE:
            if name not in s.given:
                body.pop(name, None)
    if s.stop:
        body["stop"] = list(s.stop)
    if s.seed >= 0:
        body["seed"] = s.seed
    if s.logit_bias:
        body["logit_bias"] = {str(token): bias for token, bias in s.logit_bias.items()}
    if s.ignore_eos:
        body["ignore_eos"] = True
    if s.prediction:  # OpenAI's predicted outputs; servers without them ignore the field
        body["prediction"] = {"type": "content", "content": s.prediction}
    return body


def _slot_tokens(slot: dict) -> int:
    """The tokens one llama-server slot holds in the KV cache: its prompt and what it generated."""
    following = slot.get("next_token")
    decoded = following[0] if isinstance(following, list) and following and isinstance(following[0], dict) else {}
    return (_first_int(slot.get("n_prompt_tokens")) or 0) + (_first_int(decoded.get("n_decoded")) or 0)


def _message_of(error: Any) -> str:
    return error.get("message", json.dumps(error)) if isinstance(error, dict) else str(error)


def _file_name(model_id: str) -> str:
    return model_id.replace("\\", "/").rsplit("/", 1)[-1]


def _stem(model_id: str) -> str:
    name = _file_name(model_id)
    return name[: -len(".gguf")] if name.lower().endswith(".gguf") else name


def _media(meta: dict, props: Any) -> dict | None:
    """What the server's model sees and hears, where the server says (Hearth's model list: its modalities;
    llama-server's /props); None where it does not, and then the server answers a medium for itself."""
    said = meta.get("modalities")
    if isinstance(said, list):
        return {"vision": "image" in said, "audio": "audio" in said, "mmproj": None, "mmproj_error": None}
    said = props.get("modalities") if isinstance(props, dict) else None
    if isinstance(said, dict):
        return {"vision": bool(said.get("vision")), "audio": bool(said.get("audio")), "mmproj": None,
                "mmproj_error": None}
    return None


def _props_n_ctx(props: Any) -> int | None:
    """llama-server tells its context size at /props (beside /v1), not in the model list."""
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    return _first_int(settings.get("n_ctx")) if isinstance(settings, dict) else None


def _first_int(*values: Any) -> int | None:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _first_float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
