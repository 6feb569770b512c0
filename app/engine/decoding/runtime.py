"""Load a GGUF model and its context through llama-cpp-python's low-level API.

Owns the llama.cpp handles and the small, hot helpers the decode loop needs
(token pieces, end-of-generation checks, KV memory operations).
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Callable

import llama_cpp

from app.core import env
from app.core.errors import ModelLoadError
from app.core.metrics import default_threads, rss_mb
from app.core.gguf.modelfile import check_model_file
from app.engine.process import llamalog
from app.engine.probes.gpu_memory import gpu_devices, gpu_memory_mb
from app.protocol.messages import LoadOptions
from app.engine.decoding.threads import OthersCpu, ThreadController, runnable_others
from app.engine.decoding.token_bound import TokenBound

_KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}  # ggml_type values
_FLASH = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}

_backend_ready = False


def ensure_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        llamalog.install(verbose=env.LLAMA_VERBOSE.get())
        llama_cpp.llama_backend_init()
        _backend_ready = True


def explain_load_failure(path: Path) -> str:
    """Turn llama.cpp's last log lines into one sentence about the file."""
    lines = llamalog.recent_lines()
    text = " ".join(lines).lower()
    name = path.name
    for line in lines:
        if "unknown model architecture" in line:
            arch = line.split("unknown model architecture:")[-1].strip().strip("'\"")
            return f"{name} uses the model architecture '{arch}', which this llama.cpp build does not support."
    if "not within the file bounds" in text or "truncated" in text or "failed to read" in text:
        return f"{name} is truncated or corrupt: its tensor data runs past the end of the file."
    errors = [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    detail = errors[-1] if errors else "no reason given"
    return f"llama.cpp could not load {name}: {detail}"


class Runtime:
    """One loaded model with one context: sequence 0, or one sequence per parallel slot.

    With n_parallel slots the KV cache holds n_ctx cells for each sequence (the context is per
    conversation, as Ollama's parallel requests have it), so `n_ctx` is always one sequence's context.
    """

    def __init__(self, options: LoadOptions, extra_bufts: bool = True,
                 progress: Callable[[float], bool] | None = None, eval_tap=None, attention=None):
        """progress(fraction) is called while loading; returning False cancels the load.
        eval_tap: an app.engine.context.graph_tap.EvalTap that reads the compute graph (the importance matrix).
        attention: an app.engine.context.attention_scores.AttentionScores that reads the attention (the h2o policy);
        it needs flash attention off (the caller decides), and hears of every memory operation below."""
        ensure_backend()
        self.options = options
        self.path = check_model_file(options.model_path)
        self.model = None
        self.ctx = None
        started = time.perf_counter()
        rss_before = rss_mb()
        llamalog.clear()

        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = int(options.n_gpu_layers)
        mp.use_extra_bufts = bool(extra_bufts)
        mode = (llama_cpp.LLAMA_LOAD_MODE_MMAP if options.use_mmap else llama_cpp.LLAMA_LOAD_MODE_NONE)
        if options.use_mlock:
            mode |= llama_cpp.LLAMA_LOAD_MODE_MLOCK
        mp.load_mode = mode
        # Our own callback also silences llama.cpp's default progress dots on stderr.
        self._progress = llama_cpp.llama_progress_callback(
            lambda fraction, _data: bool(progress(fraction)) if progress else True)
        mp.progress_callback = self._progress
        self.model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), mp)
        if not self.model:
            if progress is not None and any("cancelled" in line for line in llamalog.recent_lines()):
                raise ModelLoadError(f"Loading {self.path.name} was cancelled.")
            raise ModelLoadError(explain_load_failure(self.path))

        self.n_threads = int(options.n_threads or default_threads())
        self.max_threads = self.n_threads  # what adaptive threads move below, and what calibrations are keyed by
        # No count given: the engine moves it with the machine's load (app/engine/decoding/threads.py).
        self.threads: ThreadController | None = None
        if options.n_threads is None and self.n_threads > 1:
            self.threads = ThreadController(self.n_threads, OthersCpu(), others_now=runnable_others)
        # Whether the thread count can change a greedy answer (threads.SPLIT_KV_CELLS): flash attention on or
        # left to llama.cpp (which turns it on for the CPU), with an f16 KV cache; and whether it is held now.
        self.count_changes_answers = (self.threads is not None and options.flash_attn != "off"
                                      and options.kv_type == "f16")
        self.threads_held = False
        self.n_parallel = max(1, int(options.n_parallel or 1))
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = int(options.n_ctx) * self.n_parallel
        cp.n_seq_max = self.n_parallel
        cp.kv_unified = False  # each sequence its own cells: one long chat cannot take another's room
        cp.n_batch = int(options.n_batch)
        cp.n_ubatch = min(int(options.n_batch), 512)
        cp.n_threads = self.n_threads
        cp.n_threads_batch = self.n_threads
        cp.no_perf = False  # the benchmark reads llama.cpp's own eval timers
        if options.kv_type not in _KV_TYPES:
            raise ModelLoadError(f"Unknown KV cache type '{options.kv_type}'; use f16, q8_0 or q4_0.")
        cp.type_k = _KV_TYPES[options.kv_type]
        cp.type_v = _KV_TYPES[options.kv_type]
        cp.flash_attn_type = _FLASH.get(options.flash_attn, llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO)
        if eval_tap is not None and attention is not None:
            raise ValueError("one graph callback per context: an eval tap or the attention scores")
        self._eval_tap = eval_tap  # its C callback must live as long as the context
        self.attention = attention
        if eval_tap is not None:
            cp.cb_eval = eval_tap.callback
        elif attention is not None:
            attention.for_layers(llama_cpp.llama_model_n_layer(self.model))
            cp.cb_eval = attention.callback
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            self.close()
            hint = ""
            if options.kv_type != "f16":
                hint = " A quantized KV cache needs flash attention; try --flash-attn on or --kv-type f16."
            raise ModelLoadError(
                f"llama.cpp could not create a {options.n_ctx}-token context for {self.path.name}.{hint}"
            )

        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = llama_cpp.llama_n_ctx_seq(self.ctx)
        self.n_batch = llama_cpp.llama_n_batch(self.ctx)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.extra_bufts = bool(extra_bufts)
        # Layers on a GPU: the monitor graphs its memory too.
        self.offloading = int(options.n_gpu_layers) != 0 and bool(gpu_devices())
        self._pieces: dict[int, bytes] = {}
        self.turn_stops: list[str] = []  # the chat template's plain-text turn markers (Session sets them)
        self._special_texts: tuple[str, ...] | None = None
        self._splitter: tuple | None = None  # see _special_splitter
        self._piece_buf = ctypes.create_string_buffer(256)
        self._bound = TokenBound(self.vocab)
        self.load_s = time.perf_counter() - started
        self.load_rss_mb = rss_mb() - rss_before

    def set_threads(self, n: int) -> None:
        """Generation and batch threads from the next decode on (llama.cpp takes it between two decodes)."""
        llama_cpp.llama_set_n_threads(self.ctx, n, n)
        self.n_threads = n

    def threads_for_answer(self) -> None:
        """Adaptive threads: the count to start an answer with, from what other programs do right now."""
        if self.threads is not None and not self.threads_held:
            better = self.threads.start_of_answer()
            if better is not None:
                self.set_threads(better)

    def hold_threads(self, held: bool) -> None:
        """Hold the full thread count (True) while a greedy answer's context is past threads.SPLIT_KV_CELLS, where
        the count would change its tokens; False lets the count move again. A no-op where it cannot matter."""
        if held == self.threads_held or not self.count_changes_answers or self.threads is None:
            return
        self.threads_held = held
        if held:
            n = self.threads.hold()
            if n != self.n_threads:
                self.set_threads(n)
        else:
            self.threads.release()

    def token_took(self, seconds: float) -> None:
        """Adaptive threads (self.threads set): one token's time, and the count it asks for from the next decode."""
        if self.threads_held:
            return
        better = self.threads.observe(seconds)
        if better is not None:
            self.set_threads(better)

    def threads_now(self) -> dict:
        """The thread count in use and, when the engine chooses it, why (for the monitor)."""
        if self.threads is None:
            return {"n_threads": self.n_threads}
        return {"n_threads": self.n_threads, "threads_reason": self.threads.reason}

    # --- metadata -------------------------------------------------------
    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        n = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8", "replace") if raw else None

    def describe(self) -> dict:
        desc = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.model, desc, len(desc))
        return {
            "model": self.path.name,
            "path": str(self.path),
            "name": self.meta("general.name") or self.path.stem,
            "desc": desc.value.decode("utf-8", "replace"),
            "n_params": llama_cpp.llama_model_n_params(self.model),
            "size_bytes": llama_cpp.llama_model_size(self.model),
            "n_layer": llama_cpp.llama_model_n_layer(self.model),
            "n_ctx": self.n_ctx,
            "n_ctx_train": llama_cpp.llama_model_n_ctx_train(self.model),
            "n_threads": self.n_threads,
            "n_parallel": self.n_parallel,
            "n_gpu_layers": self.options.n_gpu_layers,
            # Layers on the GPU as llama.cpp counts them (the output layer is one): what it will report as
            # "offloaded N/M layers"; 0 on a runtime without a GPU device.
            "gpu_layers": self.gpu_layers(),
            "runtime_lib": os.environ.get("LLAMA_CPP_LIB_PATH"),
            "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),  # can this build offload at all
            "extra_bufts": self.extra_bufts,
            "can_shift": bool(llama_cpp.llama_memory_can_shift(self.memory)),
            "load_s": self.load_s,
            **self.memory_now(),
        }

    def gpu_layers(self) -> int:
        if not self.offloading:
            return 0
        total = llama_cpp.llama_model_n_layer(self.model) + 1
        asked = int(self.options.n_gpu_layers)
        return total if asked < 0 else min(asked, total)

    def memory_now(self) -> dict:
        """The engine's resident memory and, when offloading, the GPUs' memory in use (MB)."""
        now = {"rss_mb": rss_mb()}
        if self.offloading:
            gpu = gpu_memory_mb()
            if gpu is not None:
                now.update(gpu_mb=gpu["used_mb"], gpu_total_mb=gpu["total_mb"])
        return now

    # --- tokens ---------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True,
                 limit: int | None = None) -> list[int]:
        """The text's tokens. With parse_special, special-token markup becomes control tokens; llama.cpp does
        that in time quadratic in the number of markers (10k chat turns: 3 s, 40k: 30 s, measured), so the text
        is split at the markers here, in one pass, and only the plain text between them goes to llama.cpp, as
        llama.cpp itself does after its split. limit: stop soon after that many tokens (the caller only needs
        to know that the text is longer)."""
        if parse_special:
            split = self._special_splitter()
            tokens = (self._tokenize_split(text, add_special, split, limit) if split is not None
                      else self._tokenize_plain(text, add_special, parse_special))
            # A template that writes {{ bos_token }} itself (several families' official ones do) must not get a
            # second BOS from tokenizing: it changes the answer, and llama.cpp warns of it. One BOS, as
            # llama-cpp-python's own chat path has it.
            if (add_special and len(tokens) > 1 and self.add_bos()
                    and tokens[0] == tokens[1] == llama_cpp.llama_vocab_bos(self.vocab)):
                del tokens[0]
            return tokens
        return self._tokenize_plain(text, add_special, parse_special)

    def fewest_tokens(self, text: str) -> int:
        """A lower bound on the tokens the text is, from its bytes alone (0 where none is known)."""
        return self._bound.fewest(text)

    def longest_token_bytes(self) -> int:
        """Bytes of the longest text one token spells (0: no bound known)."""
        return self._bound.longest_piece()

    def surely_longer(self, text: str, limit: int) -> bool:
        """Whether the text is more than `limit` tokens, known without tokenizing it (app/engine/decoding/
        token_bound.py); False when that cannot be known so (tokenize it to tell)."""
        # A text of at most `limit` characters can only be longer where one token spells less than a character.
        return len(text) > limit and self._bound.fewest(text) > limit

    def _special_splitter(self):
        """(regex of the special texts, longest first; their token ids), or None where llama.cpp's own
        handling must decide: a vocabulary whose control tokens strip the whitespace around them."""
        if self._splitter is None:
            strips = llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP | llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP
            ids: dict[str, int] = {}
            for text in self.special_texts():
                tokens = self._tokenize_plain(text, False, True)
                if len(tokens) == 1:
                    if llama_cpp.llama_vocab_get_attr(self.vocab, tokens[0]) & strips:
                        self._splitter = (None,)
                        return None
                    ids[text] = tokens[0]
            import re

            pattern = re.compile("|".join(re.escape(t) for t in sorted(ids, key=len, reverse=True))) if ids else None
            self._splitter = (pattern, ids) if pattern is not None else (None,)
        return self._splitter if self._splitter[0] is not None else None

    def _tokenize_split(self, text: str, add_special: bool, split, limit: int | None) -> list[int]:
        pattern, ids = split
        out: list[int] = []
        if add_special and llama_cpp.llama_vocab_get_add_bos(self.vocab):
            out.append(llama_cpp.llama_vocab_bos(self.vocab))
        at = 0
        seen: dict[str, list[int]] = {}  # a chat repeats its plain pieces ("user\n", "\n") once per turn
        for match in pattern.finditer(text):
            if match.start() > at:
                piece = text[at:match.start()]
                tokens = seen.get(piece)
                if tokens is None:
                    tokens = seen[piece] = self._tokenize_plain(piece, False, False)
                out += tokens
            out.append(ids[match.group()])
            at = match.end()
            if limit is not None and len(out) > limit:
                return out
        if at < len(text):
            out += self._tokenize_plain(text[at:], False, False)
        if add_special and llama_cpp.llama_vocab_get_add_eos(self.vocab):
            out.append(llama_cpp.llama_vocab_eos(self.vocab))
        return out

    def _tokenize_plain(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """Bytes of one token (special tokens render as nothing); cached, it is per-token hot."""
        cached = self._pieces.get(token)
        if cached is None:
            n = llama_cpp.llama_token_to_piece(self.vocab, token, self._piece_buf, 256, 0, False)
            cached = self._piece_buf.raw[: max(n, 0)]
            self._pieces[token] = cached
        return cached

    def token_text(self, token: int) -> str:
        raw = llama_cpp.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""

    def special_texts(self) -> tuple[str, ...]:
        """The texts that tokenizing with parse_special turns into control tokens (<|im_start|>, ...), longest
        first. Read once per model: a loop over the vocabulary costs tens of milliseconds."""
        if self._special_texts is None:
            flags = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
            texts = {self.token_text(t) for t in range(self.n_vocab)
                     if llama_cpp.llama_vocab_get_attr(self.vocab, t) & flags}
            self._special_texts = tuple(sorted((t for t in texts if t), key=len, reverse=True))
        return self._special_texts

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def bos_eos_text(self) -> tuple[str, str]:
        bos = llama_cpp.llama_vocab_bos(self.vocab)
        eos = llama_cpp.llama_vocab_eos(self.vocab)
        return (self.token_text(bos) if bos >= 0 else "", self.token_text(eos) if eos >= 0 else "")

    def add_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    # --- KV memory ------------------------------------------------------
    # `seq` is the sequence of a parallel slot; 0 is the only one without slots.
    # The attention scores (h2o) mirror each operation: they must know which cell holds which position.
    def kv_remove(self, p0: int, p1: int = -1, seq: int = 0) -> bool:
        ok = bool(llama_cpp.llama_memory_seq_rm(self.memory, seq, p0, p1))
        if ok and self.attention is not None:
            self.attention.removed(p0, p1)
        return ok

    def kv_shift(self, p0: int, p1: int, delta: int, seq: int = 0) -> None:
        llama_cpp.llama_memory_seq_add(self.memory, seq, p0, p1, delta)
        if self.attention is not None:
            self.attention.shifted(p0, p1, delta)

    def kv_pos_max(self, seq: int = 0) -> int:
        return llama_cpp.llama_memory_seq_pos_max(self.memory, seq)

    def kv_clear(self, seq: int | None = None) -> None:
        """Forget one sequence, or every sequence (None)."""
        if seq is None or self.n_parallel == 1:
            llama_cpp.llama_memory_clear(self.memory, True)
        else:
            llama_cpp.llama_memory_seq_rm(self.memory, seq, -1, -1)
        if self.attention is not None:
            self.attention.cleared()

    def perf(self) -> dict:
        data = llama_cpp.llama_perf_context(self.ctx)
        return {"t_p_eval_ms": data.t_p_eval_ms, "t_eval_ms": data.t_eval_ms,
                "n_p_eval": data.n_p_eval, "n_eval": data.n_eval}

    def perf_reset(self) -> None:
        llama_cpp.llama_perf_context_reset(self.ctx)

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass
