"""`hearth models list|show|search|pull|import|rm|fit|quantize`: the model manager on the command line."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path

from app.core.terminal_text import one_line
from app.core.gguf.quant_types import CALIBRATED_TYPES, NEEDS_IMATRIX, QUANTIZE_TYPES, label
from app.core.units import human_size
from app.protocol.messages import KV_TYPES, LoadOptions


def register(sub) -> None:
    p = sub.add_parser("models", help="list, show, search, download, import, remove, fit and quantize models",
                       description="The local model library and Hugging Face downloads.")
    models_sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    s = models_sub.add_parser("list", help="models on this computer (Hearth's and other apps', read-only)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--no-discover", action="store_true", help="skip other apps' folders")
    s.set_defaults(func=_list)

    s = models_sub.add_parser("show", aliases=["inspect"], help="GGUF metadata without loading the model")
    s.add_argument("model", metavar="PATH|NAME")
    s.add_argument("--json", action="store_true")
    s.add_argument("--tensors", action="store_true", help="also list every tensor (with --json)")
    s.set_defaults(func=_inspect)

    s = models_sub.add_parser("search", help="GGUF repositories on Hugging Face (no query: recommended models)")
    s.add_argument("query", nargs="?", default="")
    s.add_argument("--limit", type=int, default=10, metavar="N")
    s.add_argument("--token", help="Hugging Face token (default: HF_TOKEN or your saved login)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_search)

    s = models_sub.add_parser("pull", help="download a GGUF model from Hugging Face (resumes, verifies SHA-256)")
    s.add_argument("repo", metavar="REPO", help="owner/name")
    s.add_argument("file", metavar="FILE", nargs="?", help="file in the repository (default: by --quant)")
    s.add_argument("--quant", metavar="TYPE", help="quantization type to pick, e.g. Q4_K_M (default)")
    s.add_argument("--token", help="Hugging Face token for gated repositories (default: HF_TOKEN)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_pull)

    s = models_sub.add_parser("import", help="add a GGUF file to the library")
    s.add_argument("path", metavar="PATH")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--link", dest="mode", action="store_const", const="link",
                      help="record the file where it is (default; Hearth never deletes it)")
    mode.add_argument("--copy", dest="mode", action="store_const", const="copy", help="copy it into Hearth's folder")
    mode.add_argument("--move", dest="mode", action="store_const", const="move", help="move it into Hearth's folder")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_import, mode="link")

    s = models_sub.add_parser("rm", help="delete a model Hearth owns (other apps' files are never deleted)",
                              description="Says what it will delete (path and size) and asks first; a linked "
                                          "import is only forgotten, its file stays.")
    s.add_argument("model", metavar="ID|NAME|PATH")
    s.add_argument("--yes", "-y", action="store_true", help="do not ask (for scripts)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_rm)

    s = models_sub.add_parser("fit", help="will it fit? memory estimate and suggested GPU layers")
    s.add_argument("model", metavar="PATH|NAME")
    s.add_argument("--ctx", type=int, metavar="N",
                   help=f"context size (default {LoadOptions.n_ctx} or the trained context)")
    s.add_argument("--kv-type", choices=KV_TYPES, default=LoadOptions.kv_type)
    s.add_argument("--draft-model", metavar="PATH|NAME",
                   help="the draft model for speculative decoding that the load holds too: its weights and its own "
                   "KV cache count")
    s.add_argument("--parallel", type=int, default=LoadOptions.n_parallel, metavar="N",
                   help="requests served at once (hearth serve --parallel): each has a context of its own")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_fit)

    s = models_sub.add_parser("quantize", help="requantize with llama.cpp's quantizer",
                              description="Types: " + ", ".join(label(q) for q in QUANTIZE_TYPES) + "; made for "
                                          "an importance matrix (--imatrix): " + ", ".join(CALIBRATED_TYPES) + ".")
    s.add_argument("model", metavar="PATH|NAME")
    # Checked by quantize() rather than argparse, so a wrong type is one sentence and exit code 1.
    s.add_argument("--type", required=True, metavar="TYPE",
                   help=" | ".join(label(q) for q in QUANTIZE_TYPES) + " | with --imatrix: "
                        + " | ".join(CALIBRATED_TYPES))
    s.add_argument("--out", metavar="PATH", help="output file (default: Hearth's models folder)")
    s.add_argument("--allow-requantize", action="store_true",
                   help="quantize a file that is already quantized (its loss stays; better start from F16/BF16)")
    s.add_argument("--imatrix", metavar="FILE",
                   help="an importance matrix (hearth models imatrix, or llama-imatrix's .gguf): calibrates the "
                        "quantization; " + ", ".join(NEEDS_IMATRIX) + " need one")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_quantize)

    s = models_sub.add_parser("imatrix", help="an importance matrix from your text, to calibrate quantization",
                              description="Runs the model over your text and sums, per weight matrix, how strongly "
                                          "each input is used (llama-imatrix's sums and file format), so that "
                                          "`models quantize --imatrix FILE` keeps the weights your text needs.")
    s.add_argument("model", metavar="PATH|NAME", help="the model to calibrate: best its F16/BF16 original")
    source = s.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", metavar="FILE", nargs="+", help="text files of the kind you will use it for")
    source.add_argument("--chats", action="store_true", help="your chat history in Hearth")
    s.add_argument("-o", "--out", metavar="FILE", help="the matrix file (default: Hearth's data folder)")
    s.add_argument("--ctx", type=int, default=512, metavar="N", help="tokens per chunk (default 512)")
    s.add_argument("--threads", type=int, metavar="N")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_imatrix)

    if importlib.util.find_spec("app.commands.convert") is not None:
        importlib.import_module("app.commands.convert").register(models_sub)


# --- formatting -----------------------------------------------------------------

def _label(qtype: str | None) -> str:
    return label(qtype) if qtype else "?"


def human_params(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _print_json(data) -> int:
    print(json.dumps(data, indent=2, default=str))
    return 0


class ProgressBar:
    """A one-line bar on a terminal; a line per 10% otherwise (logs, pipes). Counts bytes, or `unit`s. A context
    manager: the bar's line ends with it, however the work ends."""

    def __init__(self, label: str, stream=None, unit: str | None = None):
        self.label, self.stream, self.unit = label, stream or sys.stderr, unit
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._last_tenth = -1

    def __call__(self, done: int, total: int) -> None:
        frac = done / total if total else 0.0
        if self.tty:
            bar = "#" * int(frac * 30)
            if self.unit:
                elapsed = time.monotonic() - self.started
                left = f", {elapsed / done * (total - done):.0f} s left" if done else ""
                amount = f"{done:,} / {total:,} {self.unit}{left}"
            else:
                speed = done / max(time.monotonic() - self.started, 1e-6)
                amount = f"{human_size(done)} / {human_size(total)} {human_size(speed)}/s"
            self.stream.write(f"\r{self.label} [{bar:<30}] {frac:5.1%} {amount} ")
            self.stream.flush()
        elif int(frac * 10) > self._last_tenth:
            self._last_tenth = int(frac * 10)
            of = f"{total:,} {self.unit}" if self.unit else human_size(total)
            print(f"{self.label}: {frac:.0%} of {of}", file=self.stream, flush=True)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *_exc) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# --- actions ----------------------------------------------------------------------

def _list(args: argparse.Namespace) -> int:
    from app.core.library import list_models

    entries = list_models(discover_others=not args.no_discover)
    if args.json:
        return _print_json([e.to_dict() for e in entries])
    rows = [("ID", "SIZE", "ARCH", "PARAMS", "QUANT", "CONTEXT", "SOURCE", "NAME")]
    for e in entries:
        rows.append((one_line(e.id), human_size(e.size_bytes), one_line(e.architecture or "?"),
                     human_params(e.parameters), e.quantization or "?",
                     f"{e.context_length:,}" if e.context_length else "?",
                     e.source + (" (unreadable)" if e.error else ""), one_line(e.name) if e.name != e.id else ""))
    widths = [min(max(len(r[i]) for r in rows), 60) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for e in entries:
        if e.error:
            print(f"note: {one_line(e.error)}", file=sys.stderr)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from app.core.gguf.chat_formats import format_for_file
    from app.core.gguf.purpose import cannot_generate
    from app.core.gguf.sampling import describe as describe_sampling
    from app.core.gguf.sampling import recommended_sampling, unapplied_keys
    from app.core.gguf.info import read_gguf_info
    from app.core.library import resolve

    entry = resolve(args.model)
    info = read_gguf_info(entry.path)
    fmt = format_for_file(info)
    refusal = cannot_generate(Path(info.path).name, info.architecture, info.metadata.get)
    recommended = recommended_sampling(info.metadata.get)
    unapplied = unapplied_keys(info.metadata.get)
    if args.json:
        return _print_json({"id": entry.id, **info.to_dict(tensors=args.tensors), "chat_format": fmt.to_dict(),
                            "cannot_generate": refusal, "recommended_sampling": recommended,
                            "sampling_keys_not_applied": unapplied, "projector": entry.projector,
                            "abilities": entry.abilities})
    kv = (f"{info.kv_heads} (per layer: {sorted(set(info.kv_heads_per_layer))})" if info.kv_heads_per_layer
          else str(info.kv_heads))
    lines = [
        f"Id:             {entry.id}",
        f"File:           {one_line(info.path)} ({human_size(info.file_size)}, GGUF v{info.version})",
        f"Name:           {one_line(info.name or '?')}",
        f"Architecture:   {one_line(info.architecture or '?')}",
        f"Parameters:     {human_params(info.parameters)} ({info.parameters:,})",
        f"Quantization:   {_label(info.file_type)}",
        f"Layers:         {info.layers}",
        f"Heads:          {info.heads} attention, {kv} KV (head size {info.head_size_k})",
        f"Embedding:      {info.embedding_size}",
        f"Vocabulary:     {info.vocab_size} tokens ({info.tokenizer or '?'} tokenizer)",
        f"Context:        {info.context_length} tokens (trained)",
        f"License:        {one_line(info.license or '?')}",
        f"Chat template:  {'yes, ' + str(len(info.chat_template)) + ' characters' if info.chat_template else 'none'}",
        f"Purpose:        {'chat and completion' if refusal is None else refusal}",
        "Images, audio:  " + (f"{' and '.join(entry.abilities)} (projector {one_line(Path(entry.projector).name)}, "
                              "loaded with the model)" if entry.abilities else
                              "none: reads text only (a model that sees or hears needs its mmproj file beside it, "
                              "or --mmproj)"),
        f"Chat format:    " + (f"{fmt.name}{' (a base model)' if fmt.base_model else ''} — {fmt.why}" if refusal is None
                               else "none: it cannot chat"),
        "Sampling:       " + (f"the model recommends {describe_sampling(recommended)} (used where you set none)"
                               if recommended else "no recommendation in the file (Hearth's defaults)")
        + (f"; not applied: {', '.join(unapplied)}" if unapplied else ""),
        f"Calibration:    {_calibration(info.metadata)}",
        "Tensor types by kind:",
    ]
    for kind, types in info.quant_by_kind.items():
        lines.append(f"  {kind:<16} " + ", ".join(f"{t} x{n}" for t, n in sorted(types.items())))
    print("\n".join(lines))
    return 0


def _calibration(meta: dict) -> str:
    """What llama-quantize (and Hearth's quantize) records of the importance matrix a quant was made with."""
    from app.core.gguf import imatrix as imf
    if imf.QUANT_FILE_KEY not in meta and imf.QUANT_ENTRIES_KEY not in meta:
        return "none: the file records no importance matrix"
    chunks = meta.get(imf.QUANT_CHUNKS_KEY)
    return (f"importance matrix {meta.get(imf.QUANT_FILE_KEY) or '?'} ({meta.get(imf.QUANT_ENTRIES_KEY, '?')} weight "
            f"matrices" + (f", {chunks} chunks" if chunks else "") + f"), from {meta.get(imf.QUANT_DATASET_KEY) or 'an unnamed text'}")


def _search(args: argparse.Namespace) -> int:
    from app.core.library import hub
    if not args.query:
        models = hub.recommended_models()
        if args.json:
            return _print_json(models)
        print("Recommended models (hearth models pull REPO FILE):")
        for m in models:
            print(f"\n  {m['name']}  [{m.get('quant', '?')}, {m['size_gb']:.1f} GB]  {m['good_at']}")
            print(f"    {m['repo']}  {m['file']}")
            if m.get("draft"):
                d = m["draft"]
                print(f"    draft for speculative decoding: {d['name']} ({d['repo']}  {d['file']})")
        return 0
    repos = hub.search(args.query, limit=args.limit, token=args.token)
    if args.json:
        return _print_json([r.to_dict() for r in repos])
    if not repos:
        print(f"No GGUF repositories match '{args.query}'.")
        return 0
    for r in repos:
        gated = ", gated" if r.gated else ""
        print(f"{r.repo_id}  ({r.downloads or 0:,} downloads, {r.likes or 0:,} likes{gated})")
        for f in r.files:
            if (f.split_index or 1) == 1:
                part = f" (part 1 of {f.split_count})" if f.split_count else ""
                print(f"    {f.filename:<60} {human_size(f.size):>9}  {_label(f.quant)}{part}")
    return 0


def _pull(args: argparse.Namespace) -> int:
    from app.core.library import hub
    with ProgressBar(f"{args.repo}") as bar:
        result = hub.pull(args.repo, args.file, quant=args.quant, progress=bar, token=args.token)
    if args.json:
        return _print_json(result.to_dict())
    check = ("SHA-256 verified" if result.verified else "size checked (no SHA-256 published)" if result.size_checked
             else "not verified: the repository publishes neither a SHA-256 nor a size for it")
    print(f"Downloaded {result.paths[0]}" + (f" and {len(result.paths) - 1} more parts" if len(result.paths) > 1
                                              else "") + f" ({check}).")
    return 0


def _import(args: argparse.Namespace) -> int:
    from app.core.library import import_model

    entry = import_model(args.path, args.mode)
    if args.json:
        return _print_json(entry.to_dict())
    verb = {"link": "Linked", "copy": "Copied", "move": "Moved"}[args.mode]
    print(f"{verb} {entry.name} into the library ({entry.path}).")
    return 0


def _rm(args: argparse.Namespace) -> int:
    from app.core.errors import HearthError
    from app.core.library import carry_out, plan_removal

    removal = plan_removal(args.model)
    if not args.yes:
        if not sys.stdin.isatty():
            raise HearthError(f"{removal.describe()} Add --yes to do it without a question.")
        try:
            answer = input(f"{removal.describe()} Go ahead? [y/N] ").strip().lower()
        except EOFError:
            answer = ""
        if answer not in ("y", "yes"):
            print("Nothing was removed.")
            return 1
    removal = carry_out(removal)
    if args.json:
        return _print_json({"entry": removal.entry.to_dict(), "deleted": removal.deleted,
                            "forgotten": removal.forgotten})
    if removal.forgotten:
        print(f"Removed {removal.entry.id} from the library; the file stays at {removal.entry.path}.")
    else:
        print(f"Deleted {', '.join(removal.deleted)}.")
    return 0


def _fit(args: argparse.Namespace) -> int:
    from app.backends.runtime_choice import fit_on
    from app.core.library import resolve
    from app.core.units import mib_as_mb

    draft = resolve(args.draft_model).path if args.draft_model else None
    est = fit_on(resolve(args.model).path, args.ctx, args.kv_type, draft=draft, n_parallel=args.parallel)
    if args.json:
        return _print_json(est.to_dict())
    gpu = f"{mib_as_mb(est.gpu_free_mb)} free" if est.gpu_free_mb is not None else "none usable by this llama.cpp build"
    print(f"Model:          {est.model}")
    print(f"Context:        {est.n_ctx:,} tokens, KV cache {est.kv_type}")
    print(f"Weights:        {mib_as_mb(est.weights_mb)}")
    print(f"KV cache:       {mib_as_mb(est.kv_cache_mb)}" + (f" ({est.n_parallel} contexts)" if est.n_parallel > 1
                                                                else ""))
    if est.draft_model:
        print(f"Draft model:    {mib_as_mb(est.draft_mb)} ({Path(est.draft_model).name}: weights, KV cache at "
              f"{est.draft_n_ctx:,} tokens of its own context, buffers)")
    print(f"Compute:        {mib_as_mb(est.compute_mb)} (llama.cpp reserves {mib_as_mb(est.compute_reserved_mb)})")
    print(f"Runtime:        {mib_as_mb(est.overhead_mb)}")
    print(f"Total:          {mib_as_mb(est.total_mb)} resident once loaded")
    print(f"RAM available:  {mib_as_mb(est.ram_available_mb)}")
    print(f"GPU:            {gpu}; suggested --gpu-layers {est.gpu_layers}"
          + (f", holding about {mib_as_mb(est.gpu_mb)} there" if est.gpu_mb else ""))
    print(est.verdict)
    for hint in est.hints[1:]:
        print(f"  {hint}")
    return 0


def _quantize(args: argparse.Namespace) -> int:
    from app.core.making.quantize import quantize

    with ProgressBar(f"Quantizing to {_label(args.type)}") as bar:
        result = quantize(args.model, args.type, out=args.out, progress=bar, allow_requantize=args.allow_requantize,
                          imatrix=args.imatrix)
    if args.json:
        return _print_json(result.to_dict())
    calibrated = f" calibrated with {Path(result.imatrix).name}," if result.imatrix else ""
    print(f"Wrote {result.path} ({_label(result.type)},{calibrated} {human_size(result.size_bytes)}, "
          f"{result.seconds:.1f} s); it is in the library now.")
    return 0


def _imatrix(args: argparse.Namespace) -> int:
    from app.core.making.calibration_text import chat_documents, dataset_name, file_documents
    from app.backends.imatrix import make_imatrix

    docs = chat_documents() if args.chats else file_documents(args.text)
    with ProgressBar("Computing the importance matrix", unit="chunks") as bar:
        result = make_imatrix(args.model, docs, dataset_name(docs, args.chats), out=args.out, ctx=args.ctx,
                              threads=args.threads, progress=bar)
    if args.json:
        return _print_json(result.to_dict())
    print(f"Wrote {result.path}: {result.entries} weight matrices of {Path(result.model).name} from "
          f"{result.chunks} chunks of {result.ctx} tokens ({result.seconds:.1f} s). Use it with "
          f"`hearth models quantize {Path(result.model).name} --type IQ4_XS --imatrix {result.path}`.")
    return 0
