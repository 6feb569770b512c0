"""Will this model fit? An estimate of the memory a loaded model takes.

What "memory" means here: the resident set (RSS) of Hearth's engine process
once the model is loaded, which is what the operating system has to find in
RAM. It is the sum of
- the engine's own runtime (Python, llama.cpp's libraries): a constant;
- the weights: llama.cpp maps the file and prefetches the mapping, so every
  weight page is resident after loading (with --no-mmap the same bytes are
  read into RAM instead); layers offloaded to a GPU leave RAM;
- the KV cache: layers x context x KV heads x (key + value head size) x the
  bytes of the KV type; llama.cpp clears it at creation, so it is resident;
- the compute buffers: llama.cpp reserves room for a full batch's logits
  (n_ubatch x vocabulary floats) but a chat only ever reads the last token's,
  so those pages are never touched; what is touched are the activations of one
  batch (and, without flash attention, the attention scores);
- the vocabulary's tables in llama.cpp and the sampler's arrays, per token of
  the vocabulary: small for 32k-49k vocabularies, 50 MB for a 262k one;
- a draft model for speculative decoding: its weights, its own KV cache at its
  own context (draft_context) and its context's buffers. The engine loads it
  with the target, so the fit of a load counts it.
Measured against the real engine in tests/core/library/test_fit.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from app.core.errors import HearthError
from app.core.gguf.info import GGUFInfo, read_gguf_info
from app.core.gguf.quant_types import bits_per_weight
from app.core.units import mib_as_mb

MB = 2**20
# Python + llama.cpp's libraries + numpy in an engine process before any model
# (measured on Linux x86-64: 44 MB; the estimate is dominated by weights anyway).
ENGINE_OVERHEAD_MB = 44.0
# llama.cpp's vocabulary tables (each token's text, score and attributes, the text-to-id map, the piece cache):
# 150 bytes per token, measured as the difference of two otherwise equal models of 32k and 262k tokens. A 262k
# vocabulary (Gemma 3) costs 38 MB of it, which the estimate missed (#29: 6-20% low).
VOCAB_BYTES_PER_TOKEN = 150
# The sampler's per-answer arrays over the whole vocabulary (logits as numpy, candidates, their order).
SAMPLING_BYTES_PER_TOKEN = 48
# Bytes per KV element for the KV types the engine offers (q8_0 / q4_0 blocks of 32 with an f16 scale).
KV_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
# Room left for the desktop and other programs before a model counts as fitting.
RAM_RESERVE_MB = 512.0
# A GPU needs room for CUDA's own context and the compute buffers beyond the layers.
GPU_RESERVE_MB = 600.0
# What a GPU runtime holds on its device before any weight: the driver's context, cuBLAS's workspace and the
# kernels' modules. Measured on an H200 (CUDA 13, driver 580, docs/results/gpu-h200-2026-12-04.json): 525-590 MiB
# beyond llama.cpp's own buffers for three models; other devices and drivers differ by tens of MB.
GPU_RUNTIME_MB = 570.0
# The share of the weights a full offload puts on the device: the token embeddings stay in RAM (llama.cpp reads
# one row per token there). 0.85-0.91 of the file on the H200's three models.
DEVICE_WEIGHTS_SHARE = 0.9


@dataclass
class FitEstimate:
    """Memory figures in MiB, plus the suggested offload and a one-sentence verdict."""

    model: str
    n_ctx: int
    kv_type: str
    weights_mb: float
    kv_cache_mb: float
    compute_mb: float  # the part of the compute buffers that is touched (resident)
    compute_reserved_mb: float  # what llama.cpp reserves (address space; on a GPU it is real memory)
    overhead_mb: float
    total_mb: float  # expected resident memory of the engine with everything on the CPU
    ram_available_mb: float
    gpu_free_mb: float | None
    gpu_layers: int  # suggested --gpu-layers (0: CPU only, -1 would mean all; we give the count)
    gpu_device: str | None
    n_layers: int
    ram_needed_mb: float  # with the suggested offload
    fits: bool
    verdict: str
    hints: list[str] = field(default_factory=list)
    # The device memory the suggested offload holds (what nvidia-smi shows for the engine), None without one.
    gpu_mb: float | None = None
    # A draft model for speculative decoding (#49.2): its weights, its KV cache at its own context and its compute
    # buffers, all in total_mb too. A load holds both models.
    draft_model: str | None = None
    draft_n_ctx: int = 0
    draft_mb: float = 0.0
    n_parallel: int = 1  # each parallel slot has a context of its own in the target's KV cache
    # A model's projector (mmproj, #53): its weights, loaded beside the model (in total_mb too). Its compute
    # buffer while it reads an image is not counted: it depends on the image and lasts only while it is read.
    projector: str | None = None
    projector_mb: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


# Weight types that llama.cpp's CPU backend repacks into its extra buffer types (interleaved rows for AVX2 / AVX-512
# / NEON kernels) when those are on (app/engine/probes/probe.py decides): the repacked copy is memory of its own,
# beside the mapped file's pages it was read from, which stay resident. A Q4_0 model held its block weights twice
# (the bundled model's Q4_0 copy: 400 MB where its weights, KV and buffers came to 336). Matrices of 8-row groups
# only, and never the token embeddings (read by row, not multiplied).
REPACKED_TYPES = ("Q4_0", "Q4_K", "IQ4_NL")


def repacked_bytes(info: GGUFInfo) -> int:
    """The bytes of the weights that the CPU backend keeps a repacked copy of."""
    return sum(t.n_bytes for t in info.tensors
               if t.type in REPACKED_TYPES and len(t.shape) == 2 and t.shape[1] % 8 == 0
               and not t.name.startswith("token_embd"))


def kv_cache_bytes(info: GGUFInfo, n_ctx: int, kv_type: str = "f16") -> float:
    if kv_type not in KV_BYTES:
        raise HearthError(f"Unknown KV cache type '{kv_type}'; use {', '.join(KV_BYTES)}.")
    head_k = info.head_size_k or 0
    head_v = info.head_size_v or 0
    # Sliding-window layers (Gemma-style) keep only their window; without a per-layer pattern, count all layers full.
    return n_ctx * info.kv_heads_total() * (head_k + head_v) * KV_BYTES[kv_type]


def compute_bytes(info: GGUFInfo, n_ctx: int, n_ubatch: int = 512, flash_attn: bool = True) -> tuple[float, float]:
    """(touched, reserved) bytes of llama.cpp's compute and output buffers for one context."""
    n_embd = info.embedding_size or 0
    n_ff = info.feed_forward_size or 4 * n_embd
    vocab = info.vocab_size or 0
    activations = n_ubatch * (4 * n_embd + 4 * n_ff) * 4
    if not flash_attn:
        activations += n_ctx * n_ubatch * (info.heads or 1) * 4
    logits_reserved = n_ubatch * vocab * 4
    output = vocab * 4  # the last token's logits
    tables = vocab * (VOCAB_BYTES_PER_TOKEN + SAMPLING_BYTES_PER_TOKEN)  # the vocabulary and the sampler's arrays
    return activations + output + tables, activations + logits_reserved + output + tables


def draft_context(target_n_ctx: int, draft: GGUFInfo) -> int:
    """The context a draft model gets: the target's (it follows the target's tokens), but never past what the draft
    was trained for. Beyond that its guesses are noise, and its KV cache at a long target's context was the
    biggest part of a load (#49.2: a 131,072-token target with the bundled 8,192-token model as its draft held
    1.9x the estimate). Past it, the engine decodes plainly (app/engine/speculation/draft_model.py)."""
    return max(1, min(int(target_n_ctx), int(draft.context_length or target_n_ctx)))


def _draft_bytes(draft: GGUFInfo, n_ctx: int, kv_type: str, n_ubatch: int, flash_attn: bool, repack: bool) -> float:
    """A draft model's share of a load: its weights, its own KV cache and its own context's buffers."""
    touched, _reserved = compute_bytes(draft, n_ctx, n_ubatch, flash_attn)
    weights = draft.weights_bytes + (repacked_bytes(draft) if repack else 0)
    return weights + kv_cache_bytes(draft, n_ctx, kv_type) + touched


def estimate_fit(model: str | Path | GGUFInfo, n_ctx: int | None = None, kv_type: str = "f16",
                 n_ubatch: int = 512, flash_attn: bool = True, ram_available_mb: float | None = None,
                 gpu_available_mb: float | None = None, gpu_device: str | None = None,
                 draft: str | Path | GGUFInfo | None = None, n_parallel: int = 1, repack: bool = True,
                 projector: str | Path | None = None) -> FitEstimate:
    """Estimate the memory a load holds: a model file at a context size and KV type, with its draft model if any.

    n_ctx None: the engine's default context (4096), or the trained context when that is smaller.
    gpu_available_mb None: no GPU; a number: the free memory of the device the load will use (the chosen
    runtime's, as its probe read it: app/backends/runtime_choice.fit_on; the engine's own reading in its
    preflight; tests, what-if). gpu_device: that device's name, for the verdict.
    draft: the draft model for speculative decoding, at draft_context(n_ctx). n_parallel: contexts in the
    target's KV cache (`hearth serve --parallel`; the draft serves one answer at a time and has one).
    repack: llama.cpp's extra buffer types are on (the default where the probe found them safe): the weights of
    REPACKED_TYPES count twice; off, an estimate that counts them is high by that much, never low.
    projector: the model's mmproj file the load opens beside it (its weights are read whole).
    """
    info = model if isinstance(model, GGUFInfo) else read_gguf_info(model)
    if n_ctx is None:
        n_ctx = min(info.context_length or 4096, 4096)
    if n_ctx <= 0:
        raise HearthError("The context size must be a positive number of tokens.")
    n_parallel = max(1, int(n_parallel or 1))
    weights = (info.weights_bytes + (repacked_bytes(info) if repack else 0)) / MB
    kv = kv_cache_bytes(info, n_ctx * n_parallel, kv_type) / MB
    touched, reserved = (b / MB for b in compute_bytes(info, n_ctx, n_ubatch, flash_attn))
    draft_info = draft if isinstance(draft, GGUFInfo) or draft is None else read_gguf_info(draft)
    draft_ctx = draft_context(n_ctx, draft_info) if draft_info is not None else 0
    draft_mb = _draft_bytes(draft_info, draft_ctx, kv_type, n_ubatch, flash_attn, repack) / MB if draft_info else 0.0
    projector_mb = _file_mb(projector)
    total = ENGINE_OVERHEAD_MB + weights + kv + touched + draft_mb + projector_mb
    ram = psutil.virtual_memory().available / MB if ram_available_mb is None else float(ram_available_mb)
    gpu = gpu_available_mb
    n_layers = info.layers or 0

    gpu_layers = 0
    ram_needed = total
    draft_on_device = 0.0
    if gpu and n_layers:
        room = gpu - GPU_RESERVE_MB - reserved
        if draft_mb and draft_mb <= room:  # the draft takes the same device first: it runs every step
            room -= draft_mb
            ram_needed -= draft_mb
            draft_on_device = draft_mb
        per_layer = (weights * 0.9 + kv) / n_layers  # ~10% of the weights are embeddings/output, they stay
        gpu_layers = max(0, min(n_layers, int(room // per_layer))) if per_layer > 0 else n_layers
        ram_needed -= gpu_layers * per_layer
    device = None
    if gpu_layers:
        # The offloaded layers' weights (as the file has them: a GPU repacks nothing) and KV cache, the compute
        # buffers, which llama.cpp reserves whole on the device (a batch's logits included: on a GPU, reserved is
        # resident), and the draft where it went there too.
        share = gpu_layers / n_layers
        device = (GPU_RUNTIME_MB + share * (info.weights_bytes / MB * DEVICE_WEIGHTS_SHARE + kv) + reserved
                  + draft_on_device)

    est = FitEstimate(model=info.path, n_ctx=n_ctx, kv_type=kv_type, weights_mb=round(weights, 1),
                      kv_cache_mb=round(kv, 1), compute_mb=round(touched, 1), compute_reserved_mb=round(reserved, 1),
                      overhead_mb=ENGINE_OVERHEAD_MB, total_mb=round(total, 1), ram_available_mb=round(ram),
                      gpu_free_mb=None if gpu is None else round(gpu), gpu_layers=gpu_layers,
                      gpu_device=gpu_device if gpu else None, n_layers=n_layers,
                      ram_needed_mb=round(ram_needed, 1), fits=False, verdict="",
                      gpu_mb=None if device is None else round(device, 1),
                      draft_model=draft_info.path if draft_info else None, draft_n_ctx=draft_ctx,
                      draft_mb=round(draft_mb, 1), n_parallel=n_parallel,
                      projector=str(projector) if projector_mb else None, projector_mb=round(projector_mb, 1))
    _judge(est, info)
    return est


def _file_mb(path: str | Path | None) -> float:
    try:
        return Path(path).stat().st_size / MB if path else 0.0
    except OSError:  # a projector that is not there is refused at load, in a sentence of its own
        return 0.0


def _judge(est: FitEstimate, info: GGUFInfo) -> None:
    room = est.ram_available_mb - RAM_RESERVE_MB
    est.fits = est.ram_needed_mb <= room
    name = Path(est.model).name
    device = est.gpu_device or "the GPU"
    if est.draft_model:  # said, so that a verdict with a draft is never read as the target's alone
        name += f" with the draft model {Path(est.draft_model).name}"
        draft = (f" (the draft model {mib_as_mb(est.draft_mb)} of it, at {est.draft_n_ctx:,} tokens of its own "
                 "context)")
    else:
        draft = ""
    if est.projector_mb:
        draft += f" (its projector {Path(est.projector).name}, {mib_as_mb(est.projector_mb)}, included)"
    if est.fits and est.gpu_layers and est.gpu_layers >= est.n_layers:
        est.verdict = (f"Fits: all {est.n_layers} layers on {device} ({mib_as_mb(est.gpu_free_mb)} free there), "
                       f"{mib_as_mb(est.ram_needed_mb)} of RAM for the rest.")
    elif est.fits and est.gpu_layers:
        est.verdict = (f"Fits with {est.gpu_layers} of {est.n_layers} layers on {device} and "
                       f"{mib_as_mb(est.ram_needed_mb)} in RAM ({mib_as_mb(est.ram_available_mb)} available).")
    elif est.fits:
        est.verdict = (f"Fits in RAM: needs about {mib_as_mb(est.ram_needed_mb)}{draft}, "
                       f"{mib_as_mb(est.ram_available_mb)} are available.")
    else:
        est.verdict = (f"Does not fit: {name} at {est.n_ctx:,} tokens of context needs about "
                       f"{mib_as_mb(est.ram_needed_mb)} of RAM{draft} but only {mib_as_mb(est.ram_available_mb)} are available "
                       f"(keeping {mib_as_mb(RAM_RESERVE_MB)} for the system).")
        est.hints = _hints(est, info, room)
        if est.hints:
            est.verdict += " " + est.hints[0]


def _hints(est: FitEstimate, info: GGUFInfo, room: float) -> list[str]:
    hints = []
    fixed = est.ram_needed_mb - est.kv_cache_mb
    per_token = est.kv_cache_mb / est.n_ctx if est.n_ctx else 0  # the draft's cache is capped: counted as fixed
    if per_token > 0 and fixed < room:
        ctx = int((room - fixed) / per_token) // 256 * 256
        trained = info.context_length
        if trained and ctx > trained:
            # More room than the model was trained for: suggesting it would promise what the model cannot use.
            hints.append(f"It fits with its trained context of {trained:,} tokens (--ctx {trained}); a longer "
                         "context is beyond what the model learned.")
        elif ctx >= 512:
            hints.append(f"It fits with a context of {ctx:,} tokens (--ctx {ctx}).")
    if est.kv_type == "f16" and per_token > 0 and fixed < room:  # only where the KV cache is what does not fit
        hints.append("A quantized KV cache (--kv-type q8_0) halves the KV cache.")
    bits = 8 * info.weights_bytes / max(info.parameters, 1)
    if bits > 5.5:
        smaller = info.parameters * bits_per_weight("Q4_K_M") / 8 / MB
        hints.append(f"A Q4_K_M version of this model would need about {mib_as_mb(smaller)} for its weights "
                     "(hearth models quantize ... --type Q4_K_M).")
    return hints
