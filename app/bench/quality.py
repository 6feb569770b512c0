"""`hearth bench quality`: what each quant costs in quality against its base, measured on the user's own text.

The definitions are llama-perplexity's (`--kl-divergence-base` / `--kl-divergence`), so every figure can be
checked against it:
- the text is tokenized once (with BOS where the model adds one) and cut into chunks of --ctx tokens; each
  chunk is evaluated from an empty KV cache with its first token replaced by BOS, in one batch;
- only the second half of a chunk is scored (its first half is context): the logits at position j, for j from
  ctx/2 to ctx-2, predict token j+1;
- per scored position: the KL divergence of the quant's next-token distribution from the base's,
  sum p_base * (log p_base - log p_quant), and whether the two put the same token on top;
- reported: mean and 99th-percentile KLD, the share of positions with the same top token, each model's
  perplexity exp(mean -log p(next token)) and its ratio to the base's.

The base's log-probabilities are kept on disk (a memory-mapped temporary file: positions x vocabulary floats),
so one base pass serves every quant; models are loaded one at a time, in this process. A quant is made once
from the base with llama.cpp's quantizer and kept (as `hearth bench matrix` keeps its variants). The report
names the types a file really holds: where a width is not a multiple of 256 (the bundled model's 576), llama.cpp
gives K and IQ types' tensors other types, so a "Q4_K_M" may be mostly Q5_0.

--kv-types measures the KV cache's own types the same way: the base with each cache type against the base with an
F16 cache, both with flash attention on (llama.cpp needs it for a quantized V cache), on a long context (the
longest of KV_CONTEXTS the text fills), reported beside the weights' rows.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.bench.machine import load_average
from app.bench.model_options import CONTEXT_BOUND
from app.core.making.calibration_text import read_user_text
from app.core.errors import HearthError
from app.core.gguf.info import read_gguf_info, weight_bytes_by_type
from app.core.metrics import default_threads
from app.core.making.quantize import UNQUANTIZED
from app.core.units import human_size
from app.protocol.option_spec import count, option

DEFAULT_QUANTS = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")
# A quantized cache's rounding adds up over the positions that read it: long contexts show its cost, where the
# text is long enough to fill one.
KV_CONTEXTS = (2048, 1024, 512)
KV_REFERENCE = "f16"
STORE_BYTES = 2 * 2**30  # at most this much disk for the base's log-probs (2,000+ chunks of 256 for a 49k vocabulary)
# One-token decodes timed per model after its scoring: its generation speed beside what it costs in quality.
TG_TOKENS = 32


class QualityError(HearthError):
    pass


@dataclass
class QualityOptions:
    text: str = option("", "--text", "the text to score (your own writing, code, chats)", "FILE", required=True)
    model: str | None = option(None, "--model", "the base: an F16/BF16 file or library name (default: the bundled "
                               "model's F16 copy)", "PATH|NAME")
    quants: list[str] = option(flag="--quants", help=f"the types to measure (default {','.join(DEFAULT_QUANTS)})",
                               metavar="TYPE,...", parse=lambda value: [name.upper() for name in _names(value)],
                               default_factory=lambda: list(DEFAULT_QUANTS))
    ctx: int = option(256, "--ctx", "tokens per scored chunk (default {default})", "N", bound=CONTEXT_BOUND)
    # An importance matrix: each quant is measured without and with it (the types that need one, with it only).
    imatrix: str | None = option(None, "--imatrix", "an importance matrix (hearth models imatrix): each type "
                                 "measured without and with it", "FILE")
    # KV cache types scored the same way: the base with each cache type against the base with an F16 cache, on a
    # long context (kv_ctx; None: the longest of KV_CONTEXTS the text fills).
    kv_types: list[str] = option(flag="--kv-types", help="also score these KV cache types (f16, q8_0, q4_0): the "
                                 "base with each against the base with an F16 cache, on a long context, beside the "
                                 "weights' rows (--quants \"\" for the cache alone)", metavar="TYPE,...",
                                 parse=lambda value: [name.lower() for name in _names(value)], default_factory=list)
    kv_ctx: int | None = option(None, "--kv-ctx", "the context for the KV rows (default: the longest of "
                                f"{', '.join(map(str, KV_CONTEXTS))} that the text fills)", "N", bound=CONTEXT_BOUND)
    threads: int | None = option(None, "--threads", "CPU threads (default: physical cores)", "N",
                                 bound=count(1, "threads"))
    json: bool = option(False, "--json", "print the whole result as JSON")
    plot: str | None = option(None, "--plot", "also write a chart PNG: file size against mean KLD (log scale), one "
                              "point per quant, without and with the matrix", "PATH")  # a PNG of size against KLD
    # keep the result out of the data folder's bench/quality.json (the window reads it)
    no_save: bool = option(False, "--no-save", "do not keep the figures in the data folder's bench/quality.json, "
                           "where the window's quantize pane reads them")


def _names(value: str) -> list[str]:
    """'Q8_0, q4_0,' -> ['Q8_0', 'q4_0']: a flag's comma-separated names."""
    return [name.strip() for name in value.split(",") if name.strip()]


def effective_mix(path: str | Path) -> str:
    """The weight types a file really holds, by their share of the 2-D weights' bytes: 'Q5_0 62%, Q4_K 30%, ...'."""
    by_type = weight_bytes_by_type(read_gguf_info(path).tensors)
    total = sum(by_type.values()) or 1
    return ", ".join(f"{name} {100 * n / total:.0f}%" for name, n in by_type.most_common(3) if n / total >= 0.02)


def chunks_of(tokens: list[int], ctx: int, bos: int | None) -> list[list[int]]:
    if ctx < 16:
        raise QualityError("The context for scoring must be at least 16 tokens (--ctx).")
    n = len(tokens) // ctx
    if n == 0:
        raise QualityError(f"The text has {len(tokens):,} tokens; scoring needs at least one chunk of --ctx "
                           f"{ctx} tokens. Give a longer text or a smaller --ctx.")
    out = []
    for i in range(n):
        chunk = list(tokens[i * ctx:(i + 1) * ctx])
        if bos is not None:
            chunk[0] = bos
        out.append(chunk)
    return out


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))).astype(np.float32)


def score(path: str, text: str, ctx: int, threads: int | None, base: np.ndarray | None, store: Path | None,
          on_chunk=None, max_chunks: int | None = None, kv_type: str = "f16", flash_attn: str = "auto",
          tg_tokens: int = 0) -> dict:
    """One model over the text. With base None: its log-probs go to `store` (a new memory-mapped file) and the
    result has its perplexity; with base (that file, mapped): the KLD and top-token figures against it too.
    max_chunks: score at most the text's first chunks (the matrix's quick look). kv_type, flash_attn: the
    context's KV cache type and flash attention, as the engine sets them (app/engine/decoding/runtime.py). tg_tokens:
    also time that many one-token decodes (tg_tok_s)."""
    import llama_cpp

    from app.engine.decoding.decode import Decoder
    from app.protocol.messages import LoadOptions
    from app.engine.decoding.runtime import Runtime

    # A fixed thread count for every model: the figures compare models, never two thread counts' rounding.
    rt = Runtime(LoadOptions(model_path=path, n_ctx=ctx, n_batch=ctx, n_threads=threads or default_threads(),
                             kv_type=kv_type, flash_attn=flash_attn),
                 extra_bufts=False)  # never the crash some CPUs have with them (DESIGN.md); speed is not measured
    try:
        tokens = rt.tokenize(text, add_special=rt.add_bos(), parse_special=False)
        bos = llama_cpp.llama_vocab_bos(rt.vocab) if rt.add_bos() else None
        chunks = chunks_of(tokens, ctx, bos)
        first = ctx // 2
        per_chunk = ctx - 1 - first
        # The base's log-probs take positions x vocabulary floats on disk: a long text is scored up to a bound
        # (its first chunks), and every quant then scores the chunks the base did.
        fit = max(1, STORE_BYTES // (per_chunk * rt.n_vocab * 4)) if base is None else base.shape[0] // per_chunk
        if max_chunks is not None:
            fit = min(fit, max(1, max_chunks))
        chunks = chunks[:fit]
        rows = len(chunks) * per_chunk
        kept = None
        if base is None:
            kept = np.lib.format.open_memmap(store, mode="w+", dtype=np.float32, shape=(rows, rt.n_vocab))
        elif base.shape != (rows, rt.n_vocab):
            raise QualityError(f"{Path(path).name} does not share the base's vocabulary or tokenization "
                               f"({rt.n_vocab:,} tokens against {base.shape[1]:,}); compare quants of one model.")
        nll = np.empty(rows, dtype=np.float64)
        kld = np.empty(rows, dtype=np.float64) if base is not None else None
        same = np.empty(rows, dtype=bool) if base is not None else None
        decoder = Decoder(rt)
        started = time.perf_counter()
        for c, chunk in enumerate(chunks):
            decoder.reset()
            logp = _log_softmax(decoder.verify(chunk)[first:ctx - 1])
            targets = np.asarray(chunk[first + 1:ctx])
            at = slice(c * per_chunk, (c + 1) * per_chunk)
            nll[at] = -logp[np.arange(per_chunk), targets]
            if kept is not None:
                kept[at] = logp
            else:
                ref = np.asarray(base[at])
                kld[at] = (np.exp(ref) * (ref - logp)).sum(axis=1)
                same[at] = ref.argmax(axis=1) == logp.argmax(axis=1)
            if on_chunk:
                on_chunk(c + 1, len(chunks))
        seconds = time.perf_counter() - started
        tg = _tg_speed(decoder, tokens, tg_tokens) if tg_tokens else None
        decoder.close()
        if kept is not None:
            kept.flush()
        out = {"positions": rows, "chunks": len(chunks), "tokens": len(tokens),
               "text_chunks": len(tokens) // ctx, "ppl": float(np.exp(nll.mean())), "seconds": round(seconds, 2)}
        if tg is not None:
            out["tg_tok_s"] = round(tg, 2)
        if kld is not None:
            # Standard errors of the two means over positions: what "within the noise" means for this text.
            out.update(kld_mean=float(kld.mean()), kld_p99=float(np.percentile(kld, 99)),
                       kld_max=float(kld.max()), same_top=float(same.mean()),
                       kld_se=float(kld.std(ddof=1) / np.sqrt(rows)) if rows > 1 else 0.0,
                       same_top_se=float(np.sqrt(same.mean() * (1 - same.mean()) / rows)))
        return out
    finally:
        rt.close()


def _tg_speed(decoder, tokens: list[int], n: int) -> float:
    """Tokens per second of n one-token decodes after an 8-token prompt, teacher-forced from the text: the same
    work per step as generating them, with the scoring's thread count and no extra buffer types (so `bench
    matrix`, which measures speed as the engine runs, is the figure to quote for speed alone)."""
    decoder.reset()
    decoder.eval_tokens(tokens[:8])
    steps = tokens[8:8 + n]
    started = time.perf_counter()
    for tok in steps:
        decoder.decode_one(tok)
    return len(steps) / max(time.perf_counter() - started, 1e-9)


def measure(options: QualityOptions, progress=None) -> dict:
    """Every quant against the base on the text: the result as a dict (rows in the quants' order)."""
    from app.bench.variants import prepare_variant
    from app.core.library.bundled import bundled_model_path
    from app.core.library import resolve

    text = _read_text(options.text)
    base_note = None
    if options.model is None:
        # The bundled model has no F16 of its own: its dequantized copy is the highest precision it has here.
        source = Path(bundled_model_path())
        base_path = Path(prepare_variant(source, "F16")["path"])
        base_note = "the bundled model's F16 copy (dequantized from its Q4_1, the highest precision it has)"
    else:
        base_path = source = Path(resolve(options.model).path)
        base_type = (read_gguf_info(base_path).file_type or "").upper()
        if base_type and base_type not in UNQUANTIZED:
            base_note = (f"{base_path.name} is already quantized ({base_type}): the figures say what each quant "
                         "loses against it, not against the original model")
    jobs = _jobs(options, base_path)
    kv_types = _kv_types(options)
    say = progress or (lambda _fraction, _what: None)
    with tempfile.TemporaryDirectory(prefix="hearth-quality-") as tmp:
        store = Path(tmp) / "base-logprobs.npy"
        say(0.0, f"scoring the base, {base_path.name}")
        base = score(str(base_path), text, options.ctx, options.threads, None, store,
                     lambda i, n: say(0.0, f"base chunk {i}/{n}"), tg_tokens=TG_TOKENS)
        mapped = np.load(store, mmap_mode="r")
        rows = []
        for k, (qtype, matrix) in enumerate(jobs):
            what = f"{qtype}{' with the matrix' if matrix else ''} ({k + 1}/{len(jobs)})"
            say(k / max(len(jobs), 1), f"quantizing to {what}")
            try:
                made = prepare_variant(base_path, qtype, imatrix=matrix)
                path = made["path"]
                figures = score(path, text, options.ctx, options.threads, mapped, None,
                                lambda i, n, what=what, k=k: say(k / len(jobs), f"{what}: chunk {i}/{n}"),
                                tg_tokens=TG_TOKENS)
            except HearthError as exc:
                rows.append({"type": qtype, "imatrix": bool(matrix), "ok": False, "reason": str(exc)})
                continue
            rows.append({"type": qtype, "imatrix": bool(matrix), "ok": True, "path": path,
                         "size_bytes": Path(path).stat().st_size, "mix": effective_mix(path), **figures,
                         "ppl_ratio": figures["ppl"] / base["ppl"]})
        del mapped
        kv = _measure_kv(options, kv_types, base_path, text, base["tokens"], Path(tmp), say) if kv_types else None
    return {"kind": "quality", "text": str(Path(options.text).expanduser()), "ctx": options.ctx,
            "source": str(source.resolve()),  # the model the user named: the window looks its quants up by it
            "imatrix": _matrix_summary(options.imatrix),
            "base": {"path": str(base_path), "size_bytes": base_path.stat().st_size, "mix": effective_mix(base_path),
                     "note": base_note, **base},
            "rows": rows, "kv": kv, "load_average": load_average()}


def _kv_types(options: QualityOptions) -> list[str]:
    """The KV cache types asked for, checked before anything is scored."""
    from app.core.library.fit import KV_BYTES

    types = [t.strip().lower() for t in options.kv_types if t.strip()]
    for kv_type in types:
        if kv_type not in KV_BYTES:
            raise QualityError(f"Unknown KV cache type '{kv_type}' in --kv-types; use {', '.join(KV_BYTES)}.")
    return types


def kv_context(options: QualityOptions, tokens: int) -> int:
    """The context the KV rows are scored at: --kv-ctx, else the longest of KV_CONTEXTS that the text fills once,
    else the weights' --ctx (a short text)."""
    if options.kv_ctx:
        return options.kv_ctx
    return next((ctx for ctx in KV_CONTEXTS if tokens >= ctx), options.ctx)


def _measure_kv(options: QualityOptions, kv_types: list[str], base_path: Path, text: str, tokens: int, tmp: Path,
                say) -> dict:
    """The base model with each KV cache type against the base with an F16 cache, on a long context. Flash
    attention is on in every pass: llama.cpp needs it for a quantized V cache, and the reference must differ from
    each row by the cache type alone."""
    from app.core.library.fit import kv_cache_bytes

    ctx = kv_context(options, tokens)
    info = read_gguf_info(base_path)
    store = tmp / "kv-reference-logprobs.npy"
    say(0.0, f"scoring the base with an F16 KV cache, context {ctx}")
    ref = score(str(base_path), text, ctx, options.threads, None, store, kv_type=KV_REFERENCE, flash_attn="on")
    mapped = np.load(store, mmap_mode="r")
    rows = []
    for k, kv_type in enumerate(kv_types):
        cache = {"kv_type": kv_type, "ctx": ctx, "kv_bytes": kv_cache_bytes(info, ctx, kv_type)}
        if kv_type == KV_REFERENCE:  # the reference itself: the same model, threads and batches, exactly
            rows.append({**cache, "ok": True, "positions": ref["positions"], "chunks": ref["chunks"],
                         "ppl": ref["ppl"], "ppl_ratio": 1.0, "kld_mean": 0.0, "kld_p99": 0.0, "kld_max": 0.0,
                         "kld_se": 0.0, "same_top": 1.0, "same_top_se": 0.0, "reference": True})
            continue
        say(k / len(kv_types), f"KV cache {kv_type}, context {ctx}")
        try:
            figures = score(str(base_path), text, ctx, options.threads, mapped, None, kv_type=kv_type,
                            flash_attn="on")
        except HearthError as exc:
            rows.append({**cache, "ok": False, "reason": str(exc)})
            continue
        rows.append({**cache, "ok": True, **figures, "ppl_ratio": figures["ppl"] / ref["ppl"]})
    del mapped
    return {"ctx": ctx, "reference": {"kv_type": KV_REFERENCE, "flash_attn": "on", "ppl": ref["ppl"],
                                      "positions": ref["positions"], "chunks": ref["chunks"],
                                      "text_chunks": ref["text_chunks"]},
            "rows": rows}


def _jobs(options: QualityOptions, base_path: Path) -> list[tuple[str, str | None]]:
    """(type, matrix or None) per row: every type as asked; with a matrix, each again with it right after, and a
    type llama.cpp makes only with a matrix with it alone. The matrix is checked against the base first, so a
    matrix of another model is one sentence before anything is scored."""
    from app.core.gguf.imatrix import mismatch, read_imatrix
    from app.core.gguf.quant_types import needs_imatrix_reason

    matrix = None
    if options.imatrix:
        matrix = str(Path(options.imatrix).expanduser().resolve())
        wrong = mismatch(read_imatrix(matrix), base_path.name, read_gguf_info(base_path).tensors)
        if wrong:
            raise QualityError(wrong)
    jobs = []
    for qtype in (q.upper() for q in options.quants):
        needs = needs_imatrix_reason(qtype)
        if needs and matrix is None:
            raise QualityError(needs.replace("--imatrix FILE", "bench quality --imatrix FILE"))
        if not needs:
            jobs.append((qtype, None))
        if matrix is not None:
            jobs.append((qtype, matrix))
    return jobs


def _matrix_summary(path: str | None) -> dict | None:
    if not path:
        return None
    from app.core.gguf.imatrix import read_imatrix

    matrix = read_imatrix(path)
    return {"path": matrix.path, "datasets": matrix.datasets, "chunks": matrix.chunk_count,
            "chunk_size": matrix.chunk_size, "entries": len(matrix.entries)}


def _read_text(path: str) -> str:
    if not path:
        raise QualityError("Name the text to score with --text FILE: your own writing, code or chats, the kind "
                           "of text you will use the model for.")
    return read_user_text(Path(path).expanduser(), QualityError, "score")


def format_table(result: dict) -> str:
    base = result["base"]
    lines = [f"Quality against {Path(base['path']).name} on {Path(result['text']).name}: {base['positions']:,} "
             f"positions scored ({base['chunks']} chunks of {result['ctx']} tokens, the second half of each), "
             f"llama-perplexity's definitions.",
             f"Base: {human_size(base['size_bytes'])} ({base['mix']}), perplexity {base['ppl']:.3f}."]
    if base.get("note"):
        lines.append(f"Note: {base['note']}.")
    matrix = result.get("imatrix")
    if matrix:
        texts = ", ".join(Path(d).name for d in matrix["datasets"]) or "an unnamed text"
        lines.append(f"'+ matrix': made with {Path(matrix['path']).name} ({matrix['chunks']} chunks of "
                     f"{matrix['chunk_size']} tokens of {texts}).")
    if base["chunks"] < base["text_chunks"]:
        lines.append(f"Scored the first {base['chunks']} of the text's {base['text_chunks']} chunks (the base's "
                     f"figures are kept on disk, at most {STORE_BYTES / 2**30:.0f} GiB).")
    if result["rows"]:
        lines += _table(("quant", "file", "mix"), result["rows"], "size_bytes", "mix",
                        lambda row: row["type"] + (" + matrix" if row.get("imatrix") else ""))
    kv = result.get("kv")
    if kv:
        ref = kv["reference"]
        lines += ["", f"KV cache types: the base with each cache type against the base with an F16 cache, context "
                      f"{kv['ctx']} ({ref['positions']:,} positions, {ref['chunks']} chunk{'s' * (ref['chunks'] > 1)}"
                      f"), flash attention on in every pass (a quantized V cache needs it)."]
        if kv["ctx"] < KV_CONTEXTS[-1]:
            lines.append(f"The text is shorter than {KV_CONTEXTS[-1]} tokens, so the cache was scored at --ctx "
                         f"{kv['ctx']}; a longer text shows the cost at long contexts, where it adds up.")
        lines += _table(("KV cache", "cache", ""), kv["rows"], "kv_bytes", None,
                        lambda row: row["kv_type"] + (" (reference)" if row.get("reference") else ""))
    lines.append(f"\ntg tok/s: {TG_TOKENS} one-token decodes per file after its scoring, at the scoring's threads and "
                 "without extra buffer types (`hearth bench matrix` measures speed as the engine runs).")
    lines.append(f"Load average while measuring: {result['load_average']}.")
    return "\n".join(lines)


FIGURES_HEADER = f"{'mean KLD':>9} {'99% KLD':>9} {'same top':>9} {'PPL':>9} {'PPL/base':>9} {'tg tok/s':>9}"


def _table(columns: tuple[str, str, str], rows: list[dict], size_key: str, last_key: str | None, name) -> list[str]:
    """Rows of figures under a header: name(row), a size, the figures, a last column; a failed row says why."""
    header = f"{columns[0]:<17} {columns[1]:>9}  {FIGURES_HEADER}" + (f"  {columns[2]}" if last_key else "")
    lines = ["", header, "-" * len(header)]
    for row in rows:
        if not row["ok"]:
            lines.append(f"{name(row):<17} failed: {row['reason']}")
            continue
        lines.append(f"{name(row):<17} {human_size(row[size_key]):>9}  {_figures(row)}"
                     + (f"  {row[last_key]}" if last_key else ""))
    return lines


def _figures(row: dict) -> str:
    tg = f"{row['tg_tok_s']:>9.1f}" if row.get("tg_tok_s") else f"{'-':>9}"
    return (f"{row['kld_mean']:>9.5f} {row['kld_p99']:>9.4f} {100 * row['same_top']:>8.2f}% {row['ppl']:>9.3f} "
            f"{row['ppl_ratio']:>9.4f} {tg}")


def run(options: QualityOptions, plot=None) -> int:
    """The table (or JSON) on stdout. plot(result, path) draws the --plot chart: the command line passes the Qt
    painter (app/ui/bench/quality_plot.py), as for bench matrix and window."""
    if options.plot and plot is None:
        raise QualityError("--plot needs the Qt painter, which the command line passes in.")
    live = not options.json and sys.stderr.isatty()  # a line rewritten in place: only where someone watches

    def progress(_fraction: float, what: str) -> None:
        if live:
            print(f"\r  {what:<60}", end="", file=sys.stderr, flush=True)

    result = measure(options, progress)
    if not options.no_save:
        from app.bench.quality_store import save_quality

        result["saved_to"] = str(save_quality(result))
    if options.plot:
        plot(result, options.plot)
        result["plot"] = options.plot
    if live:
        print("\r" + " " * 64 + "\r", end="", file=sys.stderr)
    print(json.dumps(result, indent=2) if options.json
          else format_table(result) + (f"\nChart: {options.plot}" if options.plot else ""))
    return 0 if all(row["ok"] for row in result["rows"] + (result["kv"] or {}).get("rows", [])) else 1


def measure_and_keep(model: str, text: str, progress=None) -> dict:
    """The window's quality measurement (its quantize pane): measure `model` (the bundled one from its F16
    copy) on the text and keep the figures where the pane reads them. Runs in app/bench/job_worker.py."""
    from app.bench.quality_store import save_quality
    from app.core.library.bundled import bundled_model_path

    bundled = Path(model).resolve() == Path(bundled_model_path()).resolve()
    result = measure(QualityOptions(text=text, model=None if bundled else model), progress)
    save_quality(result)
    return {"model": model}
